"""oppsched.analysis.report: the figures every kind draws go through save_figure."""

from __future__ import annotations

from oppsched.analysis.report import pyplot, save_figure


def test_save_figure_writes_the_png_closes_the_figure_and_returns_its_name(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert save_figure(fig, tmp_path, "line.png") == "line.png"
    assert (tmp_path / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
