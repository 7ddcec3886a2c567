"""The testbed topology, built of wired paths (oppsched.testbed.links: veth, netem or the
user-space oppsched-delay) between namespaces.

The testbed topology (docs/architecture.md, "The parts") is built of such paths between the
namespaces of an oppsched.testbed.netns Session: :class:`Topology` describes N servers, each behind
its own wired path of one-way delay d_i/2 per direction to the AP (Andrew & Hanly, CLAMP,
Table I: S_i--X, 100 Mb/s, d_i/2), one AP namespace and M client namespaces;
:class:`Testbed` builds it and records the backend chosen in :meth:`Testbed.describe`.

Addressing (IPv4 and IPv6, only ever inside the run's own namespaces):

    server i   10.1.i.1/24      fd00:1:i::1/64     (i in hex in IPv6)   AP side .254 / ::fe
    client j   10.2.j.1/24      fd00:2:j::1/64                          AP side .254 / ::fe
    client_links="tun": clients are 10.2.j.1/32, fd00:2:j::1/128 on their TUN "radio0";
    the AP's TUN "radio0" is 10.2.255.254/32, fd00:2:ffff::fe/128 with routes to 10.2/16 and
    fd00:2::/32; the AP daemon and client agents attach to these persistent TUNs by name.

Everything here needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Example::

    topo = Topology(servers=(ServerSpec("S1", rtt_ms=30),), clients=(ClientSpec("R1"),))
    with Testbed(topo) as tb:
        srv = tb.clients[0].ns.spawn_iperf3_server(5201)
        out = tb.servers[0].ns.run(["iperf3", "-c", tb.clients[0].addr4, "-J", "-t", "2"])
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from oppsched.testbed.links import (WIRED_BACKENDS, LinkSpec, build_link, choose_backend,
                                    wire_namespace)
from oppsched.testbed.hostchanges import allow_congestion_control
from oppsched.testbed.namespace import Netns
from oppsched.testbed.netns import Session
from oppsched.testbed.nsbase import DEFAULT_PREFIX, NetnsError, run_cmd, wait_for
from oppsched.testbed.privsep import RunUser

# ----------------------------------------------------------------------------------------
# The testbed topology


@dataclass(frozen=True)
class ServerSpec:
    """A server S_i behind its own wired path to the AP (Andrew & Hanly, CLAMP, Fig. 3, Table I)."""
    name: str
    rtt_ms: float  # d_i: round-trip propagation delay of the wired path; d_i/2 each way
    rate_bps: float = 0.0  # wired link capacity per direction (Table I: 100 Mb/s); 0 = none
    limit_bytes: int = 0  # FIFO in front of that rate limit, bytes; 0 = unlimited


@dataclass(frozen=True)
class ClientSpec:
    """A client R_j. With client_links="veth", link_delay_ms is the one-way delay each way
    of its stand-in link to the AP (Andrew & Hanly, CLAMP, Table I: X--R_i 1 ms); 0 = a
    plain veth."""
    name: str
    link_delay_ms: float = 0.0


@dataclass(frozen=True)
class TcpSettings:
    """Per-namespace TCP sysctls, applied to every server and client namespace."""
    congestion_control: str = "reno"
    sack: bool = True
    ecn: int = 0  # net.ipv4.tcp_ecn: 0 off, 1 request and accept, 2 accept only
    timestamps: bool = True
    window_scaling: bool = True
    no_metrics_save: bool = True  # no cached ssthresh/RTT from an earlier connection
    extra: tuple[tuple[str, str], ...] = ()  # more (key, value) sysctls

    def sysctls(self) -> dict[str, str]:
        d = {
            "net.ipv4.tcp_congestion_control": self.congestion_control,
            "net.ipv4.tcp_sack": int(self.sack),
            "net.ipv4.tcp_ecn": self.ecn,
            "net.ipv4.tcp_timestamps": int(self.timestamps),
            "net.ipv4.tcp_window_scaling": int(self.window_scaling),
            "net.ipv4.tcp_no_metrics_save": int(self.no_metrics_save),
        }
        d.update(dict(self.extra))
        return {k: str(v) for k, v in d.items()}


CLIENT_LINKS = ("veth", "tun")


@dataclass(frozen=True)
class Topology:
    servers: tuple[ServerSpec, ...]
    clients: tuple[ClientSpec, ...]
    tcp: TcpSettings = field(default_factory=TcpSettings)
    ipv4: bool = True
    ipv6: bool = True
    wired: str = "auto"  # auto: netem where the kernel has it, else oppsched-delay
    client_links: str = "veth"  # veth: stand-in links for tests; tun: TUNs for the radio
    offloads: bool = False  # False: TSO/GSO/GRO off, so pcaps and rate limits see packets
    rt_priority: int = 10  # SCHED_FIFO priority of oppsched-delay (0: normal scheduling)
    mtu: int = 1500
    seccomp: bool = True  # oppsched-delay installs its seccomp allow-list (docs/security.md)

    def validate(self) -> None:
        """Raises ValueError naming the field and the value."""
        if not self.servers:
            raise ValueError("topology.servers: empty; at least one server is needed")
        if len(self.servers) > 250:
            raise ValueError(f"topology.servers: {len(self.servers)} servers, at most 250")
        if len(self.clients) > 250:
            raise ValueError(f"topology.clients: {len(self.clients)} clients, at most 250")
        for kind, specs in (("servers", self.servers), ("clients", self.clients)):
            names = [s.name for s in specs]
            for i, n in enumerate(names):
                if not n or names.index(n) != i:
                    raise ValueError(f"topology.{kind}[{i}].name: {n!r} is empty or repeated")
        for i, s in enumerate(self.servers):
            p = f"topology.servers[{i}]"
            if not (isinstance(s.rtt_ms, (int, float)) and 0 <= s.rtt_ms <= 60_000):
                raise ValueError(f"{p}.rtt_ms: {s.rtt_ms!r} not in [0, 60000]")
            if not (s.rate_bps == 0 or 1e3 <= s.rate_bps <= 1e12):
                raise ValueError(f"{p}.rate_bps: {s.rate_bps!r} not 0 or in [1e3, 1e12]")
            if not (isinstance(s.limit_bytes, int) and s.limit_bytes >= 0):
                raise ValueError(f"{p}.limit_bytes: {s.limit_bytes!r} is not an int >= 0")
        for j, c in enumerate(self.clients):
            if not (0 <= c.link_delay_ms <= 60_000):
                raise ValueError(f"topology.clients[{j}].link_delay_ms: {c.link_delay_ms!r} "
                                 "not in [0, 60000]")
        if self.wired not in WIRED_BACKENDS:
            raise ValueError(f"topology.wired: {self.wired!r} not one of "
                             f"{', '.join(WIRED_BACKENDS)}")
        if self.client_links not in CLIENT_LINKS:
            raise ValueError(f"topology.client_links: {self.client_links!r} not one of "
                             f"{', '.join(CLIENT_LINKS)}")
        if not (self.ipv4 or self.ipv6):
            raise ValueError("topology.ipv4/ipv6: both false; at least one family is needed")
        if not (0 <= self.rt_priority <= 99):
            raise ValueError(f"topology.rt_priority: {self.rt_priority!r} not in [0, 99]")
        if not (576 <= self.mtu <= 65535):
            raise ValueError(f"topology.mtu: {self.mtu!r} not in [576, 65535]")
        if not re.fullmatch(r"[a-z0-9_]{1,15}", self.tcp.congestion_control):
            raise ValueError(f"topology.tcp.congestion_control: {self.tcp.congestion_control!r}")
        if self.tcp.ecn not in (0, 1, 2):
            raise ValueError(f"topology.tcp.ecn: {self.tcp.ecn!r} not 0, 1 or 2")

    @classmethod
    def clamp_fig3(cls, **kw) -> "Topology":
        """Andrew & Hanly, CLAMP, Fig. 3 with Tables I-II: S1..S4 with d = 30, 130, 10, 180 ms
        over 100 Mb/s wired links; clients R1, R2 and R34 (R3 and R4 share one device and
        one AP queue, so one namespace); X--R links 1 ms."""
        servers = tuple(ServerSpec(f"S{i + 1}", d, rate_bps=100e6)
                        for i, d in enumerate((30.0, 130.0, 10.0, 180.0)))
        clients = (ClientSpec("R1", 1.0), ClientSpec("R2", 1.0), ClientSpec("R34", 1.0))
        return cls(servers=servers, clients=clients, **kw)


def server_addr(i: int, v6: bool, ap_side: bool = False) -> str:
    if v6:
        return f"fd00:1:{i:x}::{'fe' if ap_side else '1'}"
    return f"10.1.{i}.{254 if ap_side else 1}"


def client_addr(j: int, v6: bool, ap_side: bool = False) -> str:
    if v6:
        return f"fd00:2:{j:x}::{'fe' if ap_side else '1'}"
    return f"10.2.{j}.{254 if ap_side else 1}"


AP_TUN_ADDR4, AP_TUN_ADDR6 = "10.2.255.254", "fd00:2:ffff::fe"
CLIENT_NET4, CLIENT_NET6 = "10.2.0.0/16", "fd00:2::/32"


@dataclass
class Node:
    """A server or client as built: its namespace, interface and addresses."""
    name: str
    ns: Netns
    dev: str
    addr4: str | None
    addr6: str | None
    gw4: str | None  # next hop towards the AP (None on a TUN: routes point at the device)
    gw6: str | None

    def addr(self, v6: bool = False) -> str:
        a = self.addr6 if v6 else self.addr4
        if a is None:
            raise NetnsError(f"{self.name}: no {'IPv6' if v6 else 'IPv4'} address "
                             "(family switched off in the topology)")
        return a


def ensure_congestion_control(name: str, session: Session) -> list[str]:
    """Makes `name` usable as a namespace's default TCP congestion control.

    A namespace other than the host's may only default to an algorithm in the host's
    net.ipv4.tcp_allowed_congestion_control (the kernel refuses others with EPERM), so a
    missing one is added there (loading tcp_NAME first if needed) for as long as a run of
    this machine needs it: the session's teardown (or `oppsched cleanup` after a crash)
    takes it out again. That list only says what unprivileged sockets may pick: widening it
    changes no running connection. A loaded module stays loaded. Returns the host changes
    made, for the record.
    """
    base = Path("/proc/sys/net/ipv4")
    changes = []
    avail = (base / "tcp_available_congestion_control").read_text().split()
    if name not in avail:
        run_cmd(["modprobe", f"tcp_{name}"], check=False)
        avail = (base / "tcp_available_congestion_control").read_text().split()
        if name not in avail:
            raise NetnsError(f"topology.tcp.congestion_control: {name!r} is not available in "
                             f"this kernel (available: {' '.join(avail)})")
        changes.append(f"loaded kernel module tcp_{name}")
    if allow_congestion_control(name, session.name):
        changes.append(f"added {name} to the host's net.ipv4.tcp_allowed_congestion_control "
                       "(until the run ends)")
    return changes


class Testbed:
    """Builds a Topology in a fresh Session; a context manager that always tears down.

    Attributes once entered: session, ap (Netns), servers and clients (lists of Node),
    links (list of WiredLink), wired (WiredChoice),
    host_changes (what had to be changed outside the namespaces, normally nothing).
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, topology: Topology, *, prefix: str = DEFAULT_PREFIX,
                 run_id: str | None = None, workdir: str | Path | None = None,
                 delay_binary: str | Path | None = None, handle_signals: bool = True,
                 verify: bool = True, run_user: RunUser | None | str = "auto"):
        topology.validate()
        self.verify = verify
        self.topology = topology
        # "auto": the processes of the run switch to the run user (privsep.RunUser.resolve);
        # None keeps them root.
        if run_user == "auto":
            run_user = RunUser.resolve()
        self.session = Session(prefix, run_id, workdir, handle_signals=handle_signals,
                               run_user=run_user)
        self.delay_binary = delay_binary
        self.ap: Netns | None = None
        self.wire: Netns | None = None
        self.servers: list[Node] = []
        self.clients: list[Node] = []
        self.links: list = []
        self.wired = None
        self.final_wired_stats: dict[str, dict] = {}
        self.host_changes: list[str] = []

    @property
    def name(self) -> str:
        return self.session.name

    def __enter__(self) -> "Testbed":
        self.session.start()
        try:
            self._build()
        except BaseException:
            self.session.teardown()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.session.__exit__(exc_type, exc, tb)

    def teardown(self) -> list[str]:
        return self.session.teardown()

    # -- building --

    def _build(self) -> None:
        t = self.topology
        s = self.session
        self.wired = choose_backend(t.wired, self.delay_binary)
        self.host_changes += ensure_congestion_control(t.tcp.congestion_control, s)
        self.session.on_teardown(self._collect_final_stats)

        no6 = {"net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1}
        # No DAD (link-local addresses would stay tentative ~1 s, and a router cannot send
        # neighbour solicitations meanwhile), no router solicitations or RAs: set before
        # any interface exists, so the default.* values apply to every one of them.
        quiet6 = {"net.ipv6.conf.all.accept_dad": 0, "net.ipv6.conf.default.accept_dad": 0,
                  "net.ipv6.conf.default.router_solicitations": 0,
                  "net.ipv6.conf.default.accept_ra": 0}
        tcp = {**t.tcp.sysctls(), **(quiet6 if t.ipv6 else no6)}
        self.ap = s.add_netns("ap")
        ap_sys = dict(tcp)
        ap_sys.update({"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0,
                       "net.ipv4.conf.default.rp_filter": 0})
        if t.ipv6:
            ap_sys["net.ipv6.conf.all.forwarding"] = 1
        self.ap.sysctl(ap_sys)
        srv_ns = []
        for i in range(len(t.servers)):
            ns = s.add_netns(f"s{i}")
            ns.sysctl(tcp)
            srv_ns.append(ns)
        cli_ns = []
        for j in range(len(t.clients)):
            ns = s.add_netns(f"r{j}")
            ns.sysctl(tcp)
            cli_ns.append(ns)

        def wire_ns():
            if self.wire is None:
                self.wire = wire_namespace(s)
            return self.wire

        # Wired paths S_i -- AP: one-way d_i/2 each direction.
        for i, (spec, ns) in enumerate(zip(t.servers, srv_ns)):
            link_spec = LinkSpec.symmetric(spec.rtt_ms / 2.0, spec.rate_bps, spec.limit_bytes)
            self.servers.append(self._wired_node(spec.name, i, ns, f"s{i}", link_spec,
                                                 server_addr, wire_ns, node_is_a=True))

        # AP -- clients.
        if t.client_links == "veth":
            for j, (spec, ns) in enumerate(zip(t.clients, cli_ns)):
                link_spec = LinkSpec.symmetric(spec.link_delay_ms)
                self.clients.append(self._wired_node(spec.name, j, ns, f"r{j}", link_spec,
                                                     client_addr, wire_ns, node_is_a=False))
        else:
            s.add_tun(self.ap, "radio0", mtu=t.mtu)
            if t.ipv4:
                self.ap.ip("addr", "add", f"{AP_TUN_ADDR4}/32", "dev", "radio0")
                self.ap.ip("route", "add", CLIENT_NET4, "dev", "radio0")
            if t.ipv6:
                self.ap.ip("-6", "addr", "add", f"{AP_TUN_ADDR6}/128", "dev", "radio0", "nodad")
                self.ap.ip("-6", "route", "add", CLIENT_NET6, "dev", "radio0")
            for j, (spec, ns) in enumerate(zip(t.clients, cli_ns)):
                s.add_tun(ns, "radio0", mtu=t.mtu)
                node = Node(spec.name, ns, "radio0",
                            client_addr(j, False) if t.ipv4 else None,
                            client_addr(j, True) if t.ipv6 else None, None, None)
                if t.ipv4:
                    ns.ip("addr", "add", f"{node.addr4}/32", "dev", "radio0")
                    ns.ip("route", "add", "default", "dev", "radio0")
                if t.ipv6:
                    ns.ip("-6", "addr", "add", f"{node.addr6}/128", "dev", "radio0", "nodad")
                    ns.ip("-6", "route", "add", "default", "dev", "radio0")
                self.clients.append(node)

        # Delay stages last (their interfaces exist and are up), then check readiness.
        for link in self.links:
            link.start()
        for link in self.links:
            link.wait_ready()
        if self.verify and t.client_links == "veth" and self.clients:
            self.check_reachability()

    def check_reachability(self, timeout: float | None = None) -> None:
        """Pings every client from every server (each family) once: proves the routes and
        fills the neighbour caches, so a flow's first packets do not wait for ARP/ND
        through the delayed path. Raises NetnsError naming the pairs that failed."""
        t = self.topology
        if timeout is None:  # three round trips of the longest path, at least 1 s
            timeout = max(1.0, 3 * max(s.rtt_ms for s in t.servers) / 1000.0
                          + 6 * max((c.link_delay_ms for c in t.clients), default=0) / 1000.0)
        addrs = [c.addr4 for c in self.clients if c.addr4] + \
                [c.addr6 for c in self.clients if c.addr6]
        # One pinger per server, all at once: the slowest path sets the time taken.
        with ThreadPoolExecutor(max_workers=len(self.servers)) as pool:
            results = list(pool.map(lambda srv: srv.ns.ping_many(addrs, count=1, timeout=timeout),
                                    self.servers))
        failed = [f"{srv.name} -> {a}" for srv, res in zip(self.servers, results)
                  for a, r in res.items() if r[0] is None]
        if failed:
            raise NetnsError(f"{self.name}: unreachable after {timeout:g} s: " + ", ".join(failed))

    def _wired_node(self, name: str, k: int, ns: Netns, ap_dev: str, spec: LinkSpec, addr_fn,
                    wire_ns: Callable[[], Netns], node_is_a: bool) -> Node:
        """Node `name` (k-th of its kind, addresses from addr_fn) in `ns`, joined to the AP's
        `ap_dev` by a wired link of that name (built, not started; the node's eth0 is its
        end a if node_is_a, else end b), addressed and routed."""
        t = self.topology
        ends = [(ns, "eth0"), (self.ap, ap_dev)]
        if not node_is_a:
            ends.reverse()
        (a_ns, a_dev), (b_ns, b_dev) = ends
        self.links.append(build_link(self.session, ap_dev, a_ns, a_dev, b_ns, b_dev, spec,
                                     self.wired, wire_ns=wire_ns, rt_priority=t.rt_priority,
                                     seccomp=t.seccomp,
                                     mtu=t.mtu, offloads=t.offloads, start=False))
        node = Node(name, ns, "eth0",
                    addr_fn(k, False) if t.ipv4 else None,
                    addr_fn(k, True) if t.ipv6 else None,
                    addr_fn(k, False, True) if t.ipv4 else None,
                    addr_fn(k, True, True) if t.ipv6 else None)
        self._address_p2p(node, self.ap, ap_dev, k, addr_fn)
        return node

    def _address_p2p(self, node: Node, ap: Netns, ap_dev: str, k: int, addr_fn) -> None:
        t = self.topology
        if t.ipv4:
            node.ns.ip("addr", "add", f"{node.addr4}/24", "dev", node.dev)
            ap.ip("addr", "add", f"{addr_fn(k, False, True)}/24", "dev", ap_dev)
            node.ns.ip("route", "add", "default", "via", node.gw4)
        if t.ipv6:
            # nodad: usable at once (DAD would hold the address tentative for ~1 s).
            node.ns.ip("-6", "addr", "add", f"{node.addr6}/64", "dev", node.dev, "nodad")
            ap.ip("-6", "addr", "add", f"{addr_fn(k, True, True)}/64", "dev", ap_dev, "nodad")
            node.ns.ip("-6", "route", "add", "default", "via", node.gw6)

    # -- observing --

    def wired_stats(self, timeout: float = 2.0) -> dict[str, dict | None]:
        """Counters of every delayed link now (oppsched-delay JSON, or tc -s for netem)."""
        return {link.name: link.stats(timeout=timeout) for link in self.links}

    def _collect_final_stats(self) -> None:
        for link in self.links:
            link.stop()
            self.final_wired_stats[link.name] = link.final_stats()

    def describe(self) -> dict:
        """What was built, for config.json/summary.json: backend, namespaces, addresses."""
        t = self.topology
        return {
            "run": self.name,
            "wired": self.wired.describe() if self.wired else None,
            "host_changes": list(self.host_changes) + list(self.session.host_changes),
            "topology": asdict(t),
            "ap": {"ns": self.ap.name if self.ap else None},
            "wire_ns": self.wire.name if self.wire else None,
            "servers": [{"name": n.name, "ns": n.ns.name, "dev": n.dev, "addr4": n.addr4,
                         "addr6": n.addr6} for n in self.servers],
            "clients": [{"name": n.name, "ns": n.ns.name, "dev": n.dev, "addr4": n.addr4,
                         "addr6": n.addr6} for n in self.clients],
            "links": [link.describe() for link in self.links],
        }


# ----------------------------------------------------------------------------------------
# Measuring the accuracy on this machine: python -m oppsched.testbed.wired --rtt-ms 30 --count 200


def measure(rtt_ms: float, count: int = 200, interval: float = 0.01, v6: bool = False,
            rt_priority: int = 10, load_bps: float = 0.0, backend: str = "auto") -> dict:
    """Pings through a wired path of round trip `rtt_ms` and reports RTT - rtt_ms (ms).
    With load_bps > 0 an iperf3 UDP flow of that rate crosses a second wired path of the
    same AP meanwhile (the delay stages share the CPU, as in a real run)."""
    servers = (ServerSpec("S1", rtt_ms),) + ((ServerSpec("S2", rtt_ms),) if load_bps else ())
    topo = Topology(servers=servers, clients=(ClientSpec("R1"),), rt_priority=rt_priority,
                    wired=backend)
    with Testbed(topo, prefix="owmeasure") as tb:
        cli = tb.clients[0]
        load = None
        if load_bps:
            cli.ns.spawn_iperf3_server(5201)
            secs = int(count * interval + 5)
            load = tb.session.spawn(tb.servers[1].ns, ["iperf3", "-c", cli.addr(v6), "-u", "-b",
                                                       str(int(load_bps)), "-t", str(secs)],
                                    name="load")
            wait_for(lambda: tb.links[1].stats().get("directions", {}).get("ab", {})
                     .get("forwarded", 0) > 100, timeout=10, what="background load flowing")
        rtts = tb.servers[0].ns.ping(cli.addr(v6), count=count, interval=interval)
        st = tb.links[0].stats() if tb.wired.backend == "userspace" else None
        if load is not None:
            load.stop()
        got = sorted(r - rtt_ms for r in rtts if r is not None)

        def q(p):
            return got[min(len(got) - 1, int(p * len(got)))]
        out = {"backend": tb.wired.backend, "rtt_ms": rtt_ms, "family": "ipv6" if v6 else "ipv4",
               "count": count, "received": len(got), "rt_priority": rt_priority,
               "load_bps": load_bps,
               "excess_ms": {"min": got[0], "median": statistics.median(got),
                             "mean": statistics.fmean(got), "p95": q(0.95), "p99": q(0.99),
                             "max": got[-1]}}
        if st:
            out["rt_priority_applied"] = st.get("rt_priority_applied")
            out["stage_lateness_us"] = {
                k: {"mean": v["late_mean_us"], "max": v["late_max_us"],
                    "hist_edges_us": st["late_hist_edges_us"], "hist": v["late_hist"]}
                for k, v in st["directions"].items()}
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oppsched.testbed.wired",
                                 description="measure the wired-path delay accuracy here")
    ap.add_argument("--rtt-ms", type=float, default=30.0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--ipv6", action="store_true")
    ap.add_argument("--rt-priority", type=int, default=10)
    ap.add_argument("--load-bps", type=float, default=0.0)
    ap.add_argument("--backend", default="auto", choices=WIRED_BACKENDS)
    a = ap.parse_args(argv)
    try:
        res = measure(a.rtt_ms, a.count, a.interval, a.ipv6, a.rt_priority, a.load_bps, a.backend)
    except (NetnsError, ValueError) as exc:
        print(f"oppsched.testbed.wired: {exc}")
        return 1
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
