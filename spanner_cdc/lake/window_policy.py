"""The landing policy each window was extracted under: recorded by the window's first extract, kept by every later one."""

from __future__ import annotations

import json
import logging
from datetime import datetime

from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout, compact_time
from spanner_cdc.policy import Policy, parse_policy

log = logging.getLogger(__name__)
POLICIES_DIR = "_policies"  # hidden (a `_` folder): no reader of published data lists it


def policy_location(layout: LakeLayout, window_start: datetime, window_end: datetime) -> str:
    return storage.join(layout.location, POLICIES_DIR, f"{compact_time(window_start)}--{compact_time(window_end)}.json")


def recorded_policy(layout: LakeLayout, window_start: datetime, window_end: datetime) -> Policy | None:
    data = storage.read_bytes(policy_location(layout, window_start, window_end))
    if data is None:
        return None
    return parse_policy(policy_location(layout, window_start, window_end), json.loads(data)["policy"])


def window_policy(layout: LakeLayout, window_start: datetime, window_end: datetime, current: Policy) -> Policy:
    """The policy the window lands under. A window part-landed under one policy keeps it to its close (its rows must
    agree with each other), so a policy change takes effect from the next window; recorded here when none is yet.

    The record holds the policy's rules and where its key comes from, never the key."""
    recorded = recorded_policy(layout, window_start, window_end)
    if recorded is not None:
        if recorded != current:
            log.warning(
                "%s: window [%s, %s) began under landing policy %s: it closes under it; policy %s takes effect from the "
                "next window", layout.stream, window_start.isoformat(), window_end.isoformat(), recorded.fingerprint,
                current.fingerprint,
            )  # fmt: skip
        return recorded
    payload = {"fingerprint": current.fingerprint, "policy": current.to_json()}
    storage.write_bytes(policy_location(layout, window_start, window_end), json.dumps(payload, sort_keys=True, indent=2).encode())
    return current
