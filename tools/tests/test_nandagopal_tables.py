"""experiments/nandagopal/table.py --points on made-up sweep folders: one row per point and
variant, its seeds pooled, and the receivers' loss decisions summed over the flows."""

import json

from helpers import REPO, load_script

table = load_script(REPO / "experiments/nandagopal/table.py", "nandagopal_table")


def _run(d, total, shares, decisions):
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"wrc": {
        "steady_total_pps": total, "jain_index_weighted": 0.99,
        "share_of_ideal": {f"f{i}": s for i, s in enumerate(shares, 1)}}}))
    for i, (rnd, halved, ignored) in enumerate(decisions, 1):
        (d / f"wrc.f{i}.recv.stats.json").write_text(json.dumps({"flows": {"1": {
            "random_losses": rnd, "congestion_losses": halved,
            "congestion_ignored": ignored}}}))


def test_points_pool_each_variants_seeds_and_sum_the_decisions_over_flows(tmp_path):
    pt = tmp_path / "points" / "error=experiments_nandagopal_links_error-3pct.csv"
    for k, total in enumerate((60.0, 62.0, 64.0)):
        _run(pt / "act" / f"seed-{k}", total, [1.0, 0.9, 1.1, 1.0, 1.0],
             [(10, 1, 0)] * 5)
    _run(pt / "ignore" / "seed-0", 70.0, [1.0] * 5, [(10, 1, 2)] * 5)
    (pt / "ignore" / "seed-1").mkdir()  # a seed still running: no summary, left out
    rows = table.points_table(tmp_path).splitlines()
    assert len(rows) == 4, rows
    act = rows[2].split(" | ")
    assert act[0] == "| error=error-3pct" and act[1:3] == ["act", "3"]
    m, h = table.mean_ci([60.0 / table.LINK_PPS, 62.0 / table.LINK_PPS, 64.0 / table.LINK_PPS])
    assert act[3] == f"{m:.2f} ± {h:.2f}"
    assert act[-3:] == ["50.00 ± 0.00", "5.00 ± 0.00", "0.00 ± 0.00 |"]
    ignore = rows[3].split(" | ")
    assert ignore[1:3] == ["ignore", "1"] and ignore[-2:] == ["5.00", "10.00 |"]


def test_counters_give_each_flows_increases_decreases_and_share_in_the_busiest_period(tmp_path):
    runs = []
    for k, inc in enumerate((40, 60)):  # two seeds: means of the two
        d = tmp_path / f"seed-{k}"
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"wrc": {"periods": [
            {"flows": {"f1": {"weight": 1, "w_actual_pps": 10.0}}},
            {"flows": {"f1": {"weight": 1, "w_actual_pps": 24.0 + k},
                       "f2": {"weight": 2, "w_actual_pps": 40.0}}}]}}))
        for fid, dec in (("f1", 10), ("f2", 0)):
            (d / f"wrc.{fid}.recv.stats.json").write_text(json.dumps({"flows": {"1": {
                "epochs": 100, "empty_epochs": 25, "increases": inc, "decreases": dec}}}))
        runs.append(d)
    rows = table.counters_table([("w", runs)]).splitlines()
    assert len(rows) == 4, rows
    f1 = rows[2].split(" | ")
    # increases (0.40 + 0.60) / 2, decreases 0.10, share in the two-flow period: the mean
    # of 24 and 25 packets/s against a third of the link
    share = (24.5 / (table.LINK_PPS / 3))
    assert f1 == ["| w (2 runs)", "f1", "0.25", "0.500", "0.100", "5.0", f"{share:.2f} |"]
    assert rows[3].split(" | ")[5] == "∞"  # no decrease at all


def test_by_samples_bins_each_flows_epoch_ends_and_counts_their_decreases(tmp_path):
    # one run, one flow: 10 epoch ends (a loss row in between is not one) with 0, 1, 1, 2,
    # 3, 4, 5, 6, 1, 0 samples; the 1-sample epochs decrease once in three, 2-3 never, 4+
    # once in three
    d = tmp_path / "seed-0"
    d.mkdir()
    ends = [(0, "none"), (1, "decrease"), (1, "increase"), (2, "increase"), (3, "increase"),
            (4, "decrease"), (5, "increase"), (6, "increase"), (1, "increase"), (0, "none")]
    lines = ["t_s,flow,epoch,decision,samples"]
    for k, (n, dec) in enumerate(ends):
        lines.append(f"{k},1,{k},{dec},{n}")
        if k == 4:
            lines.append(f"{k}.5,1,{k},random,0")
    (d / "wrc.f5.epochs.csv").write_text("\n".join(lines) + "\n")
    rows = table.by_samples_table([("e", [d])]).splitlines()
    assert len(rows) == 3, rows
    assert rows[2].split(" | ") == ["| e (1 runs)", "f5", "2.3", "0.20 / 0.30 / 0.20 / 0.30",
                                    "0.33 / 0.00 / 0.33 |"]
