"""The contract of spanner_cdc.compat.google_cloud_spanner with the installed google-cloud-spanner."""

from __future__ import annotations

import pytest

from spanner_cdc.compat import ContractBroken, expect, google_cloud_spanner


def test_the_snapshot_keeps_its_read_timestamp_where_compat_reads_it() -> None:
    google_cloud_spanner.check()


def test_a_broken_contract_names_the_library_and_its_version() -> None:
    from importlib import metadata

    with pytest.raises(ContractBroken, match=rf"^google-cloud-spanner {metadata.version('google-cloud-spanner')}: X is not"):
        expect("google-cloud-spanner", False, "X")
