"""A replay's cluster spec with racks and blocks: nodes carry the labels of both levels, the
engine sees them as the flavor's topology, and a malformed spec is refused with the form."""

from __future__ import annotations

import pytest

from gpuqueue.sim.cluster import BLOCK_LABEL, RACK_LABEL, parse_cluster_spec


def test_eighty_nodes_in_racks_of_eight_and_blocks_of_four_racks() -> None:
    cluster = parse_cluster_spec("80x8:rack=8:block=4")
    racks = {dict(n.labels)[RACK_LABEL] for n in cluster.nodes}
    blocks = {dict(n.labels)[BLOCK_LABEL] for n in cluster.nodes}
    assert len(cluster.nodes) == 80 and len(racks) == 10 and len(blocks) == 3
    by_rack = {r: [n.name for n in cluster.nodes if dict(n.labels)[RACK_LABEL] == r] for r in racks}
    assert all(len(names) == 8 for names in by_rack.values())
    assert cluster.topologies() == {"gpu": (BLOCK_LABEL, RACK_LABEL)}
    (first, *_) = cluster.engine_nodes()
    assert first.labels == {BLOCK_LABEL: "gpu-b0", RACK_LABEL: "gpu-r0"}


def test_a_spec_without_racks_has_no_levels() -> None:
    assert parse_cluster_spec("h100=4x8,l4=2x4").topologies() == {}


@pytest.mark.parametrize("spec", ["8x8:block=2", "8x8:rack=0", "8x8:racks=2"])
def test_a_malformed_rack_spec_is_refused_with_the_form(spec: str) -> None:
    with pytest.raises(ValueError, match=r"\[FLAVOR=\]NODESxGPUS\[:rack=N\[:block=M\]\]"):
        parse_cluster_spec(spec)
