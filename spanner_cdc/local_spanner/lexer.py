"""Tokens of GoogleSQL and PostgreSQL statement text, for the local server's DDL and query parsers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from spanner_cdc.local_spanner.model import QueryError

# kinds: ident (bare word), qident (quoted identifier), string, number, param (@name / $n), punct, end
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|--[^\n]*|\#[^\n]*|/\*.*?\*/)
  | (?P<backtick>`(?:[^`\\]|\\.)*`)
  | (?P<dquote>"(?:[^"\\]|\\.|"")*")
  | (?P<squote>'(?:[^'\\]|\\.|'')*')
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<param>@[A-Za-z_][A-Za-z_0-9]*|\$\d+)
  | (?P<ident>[A-Za-z_][A-Za-z_0-9$]*)
  | (?P<punct>=>|::|<=|>=|<>|!=|\|\||[(),;<>=\[\].*+\-/:%|])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str  # identifier / string content after unquoting; punctuation as written
    pos: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "ident" and self.text.upper() in words


def _unquote(body: str, quote: str) -> str:
    body = body.replace(quote * 2, quote)
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), body)


def tokenize(text: str, postgres: bool) -> list[Token]:
    """Tokens of `text`; in PostgreSQL "x" is an identifier, in GoogleSQL a string (and `x` an identifier)."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise QueryError("INVALID_ARGUMENT", f"Syntax error at position {pos + 1}: unexpected {text[pos]!r}")
        kind = match.lastgroup or ""
        raw = match.group()
        if kind == "backtick":
            tokens.append(Token("qident", raw[1:-1], pos))
        elif kind == "dquote":
            tokens.append(Token("qident" if postgres else "string", _unquote(raw[1:-1], '"'), pos))
        elif kind == "squote":
            tokens.append(Token("string", _unquote(raw[1:-1], "'"), pos))
        elif kind != "ws":
            tokens.append(Token(kind, raw, pos))
        pos = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class Cursor:
    """A position in a token list with the small vocabulary recursive-descent parsers need."""

    def __init__(self, text: str, postgres: bool) -> None:
        self.text = text
        self.postgres = postgres
        self.tokens = tokenize(text, postgres)
        self.index = 0

    @property
    def peek(self) -> Token:
        return self.tokens[self.index]

    def next(self) -> Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def error(self, expected: str, code: str = "INVALID_ARGUMENT") -> QueryError:
        token = self.peek
        found = "end of statement" if token.kind == "end" else repr(token.text)
        line = self.text.count("\n", 0, token.pos) + 1
        column = token.pos - (self.text.rfind("\n", 0, token.pos) + 1) + 1
        return QueryError(code, f"Syntax error on line {line}, column {column}: expecting {expected} but found {found}")

    def accept(self, *words: str) -> bool:
        """Consume the keywords `words` in sequence if they are next."""
        for offset, word in enumerate(words):
            token = self.tokens[min(self.index + offset, len(self.tokens) - 1)]
            if not token.is_word(word):
                return False
        self.index += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(" ".join(words))

    def accept_punct(self, punct: str) -> bool:
        if self.peek.kind == "punct" and self.peek.text == punct:
            self.index += 1
            return True
        return False

    def expect_punct(self, punct: str) -> None:
        if not self.accept_punct(punct):
            raise self.error(repr(punct))

    def identifier(self, what: str = "an identifier") -> str:
        """A name; PostgreSQL folds unquoted names to lower case."""
        token = self.peek
        if token.kind == "qident":
            self.index += 1
            return token.text
        if token.kind == "ident":
            self.index += 1
            return token.text.lower() if self.postgres else token.text
        raise self.error(what)

    def string(self, what: str = "a string literal") -> str:
        token = self.peek
        if token.kind != "string":
            raise self.error(what)
        self.index += 1
        return token.text

    def skip_balanced(self) -> str:
        """Consume a parenthesised group (the opening parenthesis is next) and return its text."""
        start = self.peek.pos
        self.expect_punct("(")
        depth = 1
        while depth:
            token = self.next()
            if token.kind == "end":
                raise self.error("')'")
            if token.kind == "punct" and token.text == "(":
                depth += 1
            elif token.kind == "punct" and token.text == ")":
                depth -= 1
        return self.text[start : self.tokens[self.index - 1].pos + 1]

    def at_end(self) -> bool:
        while self.accept_punct(";"):
            pass
        return self.peek.kind == "end"

    def expect_end(self) -> None:
        if not self.at_end():
            raise self.error("end of statement")
