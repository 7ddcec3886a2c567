"""Authenticated endpoints (docs/security.md): the per-testbed keys (`oppsched keys`), the
apd's CURVE uplink that knows each client by its key (ZAP), and the per-run PDU integrity
tag. Unit-level pieces run without root; the apd tests use test_apd's namespace; the runs
are real testbed runs over the abstract PHY."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq")

from oppsched import mac  # noqa: E402
from oppsched.testbed import keys
from oppsched.cli import main as cli_main  # noqa: E402
from oppsched.config import ConfigError  # noqa: E402
from helpers import needs_root, netns_prefix, require_real_testbed, small_testbed, write_experiment  # noqa: E402
from test_apd import APD, bed, stats_after_usr1  # noqa: E402,F401


# ---- keys ------------------------------------------------------------------------------

def _mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_keys_generate_writes_private_secret_files_and_keeps_existing_keys(tmp_path, capsys):
    d = tmp_path / "lab"
    assert cli_main(["keys", "generate", str(d), "--users", "R1", "R2"]) == 0
    names = sorted(p.name for p in d.iterdir())
    assert names == ["R1.public", "R1.secret", "R2.public", "R2.secret", "apd.public",
                     "apd.secret", "integrity.key"]
    assert _mode(d) == 0o700
    for n in names:
        assert _mode(d / n) == (0o644 if n.endswith(".public") else 0o600), n
    pub, sec = (d / "R1.public").read_text().strip(), (d / "R1.secret").read_text().strip()
    assert len(pub) == len(sec) == 40
    assert zmq.curve_public(sec.encode()).decode() == pub
    assert len(bytes.fromhex((d / "integrity.key").read_text().strip())) == 16
    # Again, with one more user: the old keys stay (other lab hosts hold copies).
    before = {n: (d / n).read_text() for n in names}
    assert cli_main(["keys", "generate", str(d), "--users", "R1", "R2", "R3"]) == 0
    assert {n: (d / n).read_text() for n in names} == before
    assert (d / "R3.secret").exists()
    assert "2 file(s) written" in capsys.readouterr().out


def test_a_run_with_a_keys_dir_missing_a_key_fails_naming_the_field_and_the_file(tmp_path):
    d = tmp_path / "lab"
    keys.generate(d, ["R1"])
    with pytest.raises(ConfigError, match=r"security.keys_dir: .* has no R2.secret"):
        keys.install(tmp_path / "run", d, ["R1", "R2"], curve=True, integrity=False)
    os.chmod(d / "R1.secret", 0o640)
    with pytest.raises(ConfigError, match=r"R1.secret is accessible by group or others"):
        keys.install(tmp_path / "run2", d, ["R1"], curve=True, integrity=False)
    os.chmod(d / "R1.secret", 0o600)
    out = keys.install(tmp_path / "run3", d, ["R1"], curve=True, integrity=True)
    assert sorted(p.name for p in out.iterdir()) == ["R1.public", "R1.secret", "apd.public",
                                                    "apd.secret", "integrity.key"]
    assert (out / "R1.secret").read_text() == (d / "R1.secret").read_text()


# ---- the apd's CURVE uplink --------------------------------------------------------------

def _curve_config(bed, kd: Path, uplink: str | None = None) -> dict:
    keys.generate(kd, ["ue0", "ue1"])
    cfg = bed.config()
    if uplink is not None:
        cfg["endpoints"]["uplink"] = uplink
    cfg["curve"] = {"secret_key_file": str(kd / "apd.secret")}
    for u in cfg["users"]:
        u["curve_public_key_file"] = str(kd / f"{u['name']}.public")
    return cfg


def _check(bed, cfg) -> subprocess.CompletedProcess:
    return subprocess.run([str(APD), "--config", str(bed.write(cfg)), "--check"],
                          capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("case, expect", [
    ("no keys", "endpoints.uplink: 'tcp://10.253.0.1:5600' binds a non-loopback address"),
    ("open secret", "curve.secret_key_file: secret key file"),
    ("no user key", "users[1].curve_public_key_file: required with curve.secret_key_file"),
    ("phy on lan", "endpoints.phy_requests: 'tcp://10.253.0.1:5601' binds a non-loopback"),
])
@needs_root
def test_a_lan_uplink_without_usable_keys_is_refused_naming_the_field(bed, tmp_path, case,
                                                                       expect):
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    cfg = _curve_config(bed, tmp_path / "k", uplink="tcp://10.253.0.1:5600")
    if case == "no keys":
        del cfg["curve"]
        for u in cfg["users"]:
            del u["curve_public_key_file"]
    elif case == "open secret":
        os.chmod(tmp_path / "k" / "apd.secret", 0o644)
    elif case == "no user key":
        del cfg["users"][1]["curve_public_key_file"]
    elif case == "phy on lan":
        cfg["endpoints"]["phy_requests"] = "tcp://10.253.0.1:5601"
    r = _check(bed, cfg)
    assert r.returncode == 2, r.stderr
    assert expect in r.stderr, r.stderr
    if case == "no keys":
        assert "curve.secret_key_file" in r.stderr  # says how to fix it


@needs_root
def test_a_lan_uplink_with_curve_keys_passes_the_check(bed, tmp_path):
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    r = _check(bed, _curve_config(bed, tmp_path / "k", "tcp://10.253.0.1:5600"))
    assert r.returncode == 0, r.stderr


def _curve_push(ctx, ep: str, me: Path, server_pub: Path):
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 1000)
    s.curve_secretkey = me.with_suffix(".secret").read_text().strip().encode()
    s.curve_publickey = me.with_suffix(".public").read_text().strip().encode()
    s.curve_serverkey = server_pub.read_text().strip().encode()
    s.connect(ep)
    return s


@needs_root
def test_the_curve_uplink_knows_clients_by_key_refuses_strangers_and_counts_forgeries(
        bed, tmp_path):
    if APD is None:
        pytest.skip("oppsched-apd is not built")
    kd = tmp_path / "k"
    cfg = _curve_config(bed, kd)  # the shared ipc uplink, as a CURVE server
    keys.generate(tmp_path / "other", ["ue0"])  # a stranger: a key pair the apd does not know
    p = bed.start(cfg)
    ctx = zmq.Context()
    try:
        stranger = _curve_push(ctx, bed.ep("uplink"), tmp_path / "other" / "ue0",
                               kd / "apd.public")
        stranger.send(mac.wire.encode("cqi_report", 0, {"user": 0, "slot": 1, "snr_db": 30.0,
                                                        "cqi": 15}))
        ue0 = _curve_push(ctx, bed.ep("uplink"), kd / "ue0", kd / "apd.public")
        ue0.send(mac.wire.encode("cqi_report", 0, {"user": 0, "slot": 2, "snr_db": 3.0,
                                                   "cqi": 4}))
        # ue0's key naming ue1: dropped and counted, as on a per-user endpoint
        ue0.send(mac.wire.encode("harq_feedback", 1, {"user": 1, "slot": 2, "harq_pid": 0,
                                                      "ack": True}))
        st = stats_after_usr1(p, Path(cfg["traces"]["stats"]), lambda st: (
            st["zap"]["refused_unknown_key"] >= 1 and st["zmq"]["uplink"]["received"] >= 2))
        assert st["zap"]["accepted"] >= 1
        assert st["zmq"]["uplink"]["received"] == 2  # never the stranger's message
        assert st["seq"]["uplink"]["ue0"]["received"] == 1
        assert st["seq"]["uplink"]["ue1"]["received"] == 0
        assert st["uplink"]["user_mismatch"] == 1
        # A plain-text (NULL) peer on the CURVE socket gets nowhere either.
        plain = ctx.socket(zmq.PUSH)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(bed.ep("uplink"))
        plain.send(mac.wire.encode("cqi_report", 0, {"user": 1, "slot": 3, "snr_db": 3.0,
                                                     "cqi": 4}))
        ue0.send(mac.wire.encode("cqi_report", 2, {"user": 0, "slot": 4, "snr_db": 3.0,
                                                   "cqi": 4}))
        st = stats_after_usr1(p, Path(cfg["traces"]["stats"]),
                              lambda st: st["zmq"]["uplink"]["received"] >= 3)
        assert st["seq"]["uplink"]["ue1"]["received"] == 0
        assert p.poll() is None
        for s in (stranger, ue0, plain):
            s.close(0)
    finally:
        ctx.destroy(linger=0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    assert "naming user 1 arrived on user 0's endpoint (CURVE key): dropped" in p.stderr.read()


# ---- whole runs ----------------------------------------------------------------------------

REPEAT_200K = "bytes: 200000, repeat: {idle_s: 0.2, count: 3}"
CURVE_RUN = small_testbed("curve", 8, flows=(REPEAT_200K, REPEAT_200K), extra="""
    queue: {limit_bytes: 100000}
    pdu: {integrity_tag: true}
    security: {curve: true}
""")


def _run(tmp: Path, text: str):
    from oppsched.run.runner import run_experiment
    exp = write_experiment(tmp, text)
    with netns_prefix():
        runs = run_experiment(exp, tmp / "out")
    return tmp / "out", runs[0][1]


def test_a_run_with_curve_lab_links_and_the_integrity_tag_completes_tcp(tmp_path):
    require_real_testbed()
    out, s = _run(tmp_path, CURVE_RUN)
    for f in s["flows"]:  # every transfer read to EOF: three TCP connections per client
        t = f["transfers"]
        assert t["completed"] == 3 and t["incomplete"] == 0 and t["failed_connects"] == 0, t
        assert f["bytes_received"] == 3 * 200000
    apd_yaml = (out / "apd.yaml").read_text()
    assert "tcp://10.253.0.1:5600" in apd_yaml and "tcp://10.253.1.1:5600" in apd_yaml
    sec = s["security"]
    assert sec["curve"] and sec["integrity_tag"]
    assert sec["integrity_failed"] == 0
    assert sec["uplink_user_mismatch"] == 0
    assert sec["zap"]["accepted"] >= 2 and sec["zap"]["refused_unknown_key"] == 0
    apd = json.loads((out / "apd.stats.json").read_text())
    for u in ("R1", "R2"):
        assert apd["seq"]["uplink"][u]["received"] > 100  # feedback came over the lab link
    kd = out / "keys"
    assert _mode(kd) == 0o700 and _mode(kd / "apd.secret") == 0o600
    assert not s["errors"]


FORGE_RUN = small_testbed("forge", 10, flows=(
    "bytes: 100000, repeat: {idle_s: 0.2, count: 3}",), extra="""
    queue: {limit_bytes: 100000}
    pdu: {integrity_tag: true}
    faults:
      chaos: {enabled: true, seed: 5, forge: 0.1}
""")


def test_tbs_forged_over_the_air_are_counted_by_the_tag_and_never_delivered(tmp_path):
    require_real_testbed()
    out, s = _run(tmp_path, FORGE_RUN)
    forged = json.loads((out / "chaos.stats.json").read_text())["links"]["rx_0"]["forged"]
    client = json.loads((out / "client.R1.stats.json").read_text())
    assert forged >= 5  # each one costs TCP a lost segment: a few, not many
    # Every forged TB failed its tag, none reached the reassembler (no PDU errors) or the TUN.
    assert client["phy"]["integrity_failed"] == forged
    assert s["security"]["integrity_failed"] == forged
    assert client["reassembly"]["pdu_errors"] == 0
    assert client["reassembly"]["malformed"] == 0
    (f,) = s["flows"]  # each forgery NACKed: HARQ sent the AP's own TB of that slot again
    t = f["transfers"]
    assert t["completed"] >= 1 and t["failed_connects"] == 0, t


def test_oppsched_check_names_a_keys_dir_without_the_runs_keys(tmp_path, capsys):
    kd = tmp_path / "lab"
    keys.generate(kd, ["R1"])
    exp = write_experiment(tmp_path, CURVE_RUN.replace(
        "security: {curve: true}", f"security: {{curve: true, keys_dir: '{kd}'}}"))
    assert cli_main(["check", str(exp)]) == 2
    err = capsys.readouterr().err
    assert "security.keys_dir" in err and "has no R2.secret" in err, err
    assert f"oppsched keys generate {kd} --users R1 R2" in err
    keys.generate(kd, ["R1", "R2"])
    assert cli_main(["check", str(exp)]) == 0


# ---- the tag over the air: on by default with radios, bound to the run ------------------

def test_the_integrity_tag_is_on_by_default_with_radios_and_an_opt_out_is_a_warning():
    from oppsched.experiments.testbed.daemonsummary import security_summary
    from oppsched.run.runner import load_experiment
    from oppsched.experiments.testbed.schema import integrity_opt_out
    root = Path(__file__).resolve().parents[2]
    for exp in ("experiments/wu-80211/over-the-air.yaml", "experiments/clamp/fading-uhd.yaml"):
        _, _, cfg = load_experiment(root / exp)
        assert cfg["phy"]["mode"] == "uhd"
        assert cfg["pdu"]["integrity_tag"] is True, exp  # nothing in the file says so
        assert integrity_opt_out(cfg) is None
        _, _, out = load_experiment(root / exp, overrides=["pdu.integrity_tag=false"])
        assert out["pdu"]["integrity_tag"] is False
        warnings: list = []
        sec = security_summary(out, {}, warnings)
        assert sec["integrity_opt_out"] and not sec["integrity_tag"]
        assert warnings == [integrity_opt_out(out)]
        assert "pdu.integrity_tag: false with phy.mode uhd" in warnings[0]
    # Without a radio the default stays off (the TBs never leave the host), and no warning.
    _, _, cfg = load_experiment(root / "experiments/security/tag-cost.yaml",
                                overrides=["pdu.integrity_tag=null"])
    assert cfg["phy"]["mode"] != "uhd"
    assert cfg["pdu"]["integrity_tag"] is False
    assert integrity_opt_out(cfg) is None
    warnings = []
    assert not security_summary(cfg, {}, warnings)["integrity_opt_out"] and warnings == []


def test_each_run_draws_its_own_integrity_run_id_and_gives_it_to_the_apd_and_every_client(
        tmp_path):
    from helpers import run_layout
    from oppsched.testbed import daemonconf
    from oppsched.run.runner import load_experiment
    exp = write_experiment(tmp_path, small_testbed("runid", 5, flows=("", "")) +
                           "pdu: {integrity_tag: true}\n")
    _, _, cfg = load_experiment(exp)
    ids = []
    for k in range(2):
        lay = run_layout(tmp_path / f"r{k}", cfg)
        lay.keys_dir = tmp_path / "keys"
        apd = daemonconf.apd_config(cfg, lay)
        rid = apd["pdu"]["integrity_run_id"]
        assert len(bytes.fromhex(rid)) == 16
        for u in lay.users:
            assert daemonconf.client_config(cfg, lay, u)["integrity_run_id"] == rid
        ids.append(rid)
    assert ids[0] != ids[1]


def _replay_experiment(name: str, kd: Path, chaos: str) -> str:
    return small_testbed(name, 6, flows=("bytes: 100000, repeat: {idle_s: 0.2, count: 2}",),
                         extra=f"""
    queue: {{limit_bytes: 100000}}
    pdu: {{integrity_tag: true}}
    security: {{keys_dir: '{kd}'}}
    faults:
      chaos: {chaos}
""")


def test_a_tb_replayed_from_an_earlier_run_with_the_same_keys_is_counted_and_keeps_the_session(
        tmp_path):
    require_real_testbed()
    kd = tmp_path / "lab"
    keys.generate(kd, ["R1"])
    # Run 1: a receiver in range records the client's first TBs (the first carry run 1's MAC
    # session trailer).
    (tmp_path / "1").mkdir()
    out1, s1 = _run(tmp_path / "1", _replay_experiment(
        "record", kd, "{enabled: true, seed: 3, record: true}"))
    assert not s1["errors"]
    recorded = out1 / "chaos.recorded.jsonl"
    assert len(recorded.read_text().splitlines()) == 16
    # Run 2, the same testbed keys: the recorded TBs replace some of the client's own.
    (tmp_path / "2").mkdir()
    out2, s2 = _run(tmp_path / "2", _replay_experiment(
        "replay", kd, f"{{enabled: true, seed: 4, replay_from: '{recorded}', replay: 0.2}}"))
    replayed = json.loads((out2 / "chaos.stats.json").read_text())["links"]["rx_0"]["replayed"]
    client = json.loads((out2 / "client.R1.stats.json").read_text())
    assert replayed >= 3
    # Every replay failed the tag (run 2's key is not run 1's), none reached the reassembler:
    # the client never adopted run 1's session nor dropped its buffer for it.
    assert client["phy"]["integrity_failed"] == replayed
    assert client["reassembly"]["session_restarts"] == 0
    assert client["reassembly"]["dropped_restart"] == 0
    assert client["reassembly"]["pdu_errors"] == 0
    assert s2["security"]["integrity_failed"] == replayed
    (f,) = s2["flows"]  # NACKed, so HARQ sent the AP's own TBs again: TCP never noticed
    assert f["transfers"]["completed"] == 2 and f["transfers"]["failed_connects"] == 0
    assert not s2["errors"]
