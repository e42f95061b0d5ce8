"""The one table `make bench` ends with: each benchmark reports its headline figures, their targets and the ratio."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    target: float
    unit: str
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        """How many times the target is met: >= 1 meets it, whichever direction is better."""
        if self.higher_is_better:
            return self.value / self.target
        return self.target / self.value if self.value else float("inf")


FIGURES: list[Figure] = []


def report(name: str, value: float, target: float, unit: str, *, higher_is_better: bool = True) -> Figure:
    """Record a headline figure of the running benchmark (printed in the summary table by `python -m bench`)."""
    figure = Figure(name, value, target, unit, higher_is_better)
    FIGURES.append(figure)
    return figure


def render(figures: list[Figure]) -> str:
    if not figures:
        return "no figures reported"
    width = max(len(f.name) for f in figures) + 2
    lines = [f"{'figure':<{width}}{'value':>14}{'target':>16}{'ratio':>9}  verdict"]
    for f in figures:
        target = f"{'>=' if f.higher_is_better else '<='} {_number(f.target)} {f.unit}"
        verdict = "meets" if f.ratio >= 1 else "MISSES"
        lines.append(f"{f.name:<{width}}{_number(f.value) + ' ' + f.unit:>14}{target:>16}{f.ratio:>8.2f}x  {verdict}")
    return "\n".join(lines)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
