"""The suite's own scheduling: tests that share Xe2-shaped kernel builds must reach pytest-xdist's scheduler as one
group (tests/conftest.py: xe2_group), or every worker builds those kernels again and the suite takes minutes more."""
import pytest

from conftest import build_group, xe2_group


@pytest.mark.xdist_group("suite-self-check")
def test_xdist_groups_reach_the_scheduler(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not running under pytest-xdist with --dist loadgroup (e.g. -n 0): nothing is scheduled")
    # xdist marks a grouped test by a suffix on its node id, which its loadgroup scheduler reads
    assert request.node.nodeid.endswith("@suite-self-check"), (
        f"node id {request.node.nodeid!r} lost xdist's group suffix: this pytest / pytest-xdist pair does not "
        f"group tests (pyproject.toml pins pytest < 9 for this)")


def test_kernel_sharing_tests_are_grouped(request):
    """The conftest hook marks the tests that share kernel builds (build_group: those of a gemv / moe family's bmg /
    lnl binaries, and whole files of one family), and runs before xdist's own hook, which turns the mark into the node
    id suffix."""
    items = request.session.items
    groups = {}
    assert all(xe2_group(item) == build_group(item) for item in items if xe2_group(item))
    for item in items:
        group = build_group(item)
        if group:
            groups.setdefault(group, []).append(item)
            assert any(m.args == (group,) for m in item.iter_markers("xdist_group")), item.nodeid
    if not groups:
        pytest.skip("no test of a grouped family was collected in this run")
    if getattr(request.config.option, "loadgroup", False):
        for group, members in groups.items():
            assert all(m.nodeid.endswith(f"@{group}") for m in members), group
