"""From the resolved experiment to what a testbed run builds and configures: the topology
of namespaces and wired paths (oppsched.testbed.netns), the users as the daemons address them
(whose configuration files oppsched.testbed.daemonconf writes), the per-namespace TCP overrides and
the iperf3 flows."""

from __future__ import annotations

from oppsched.testbed import daemonconf, tcp_metrics, wrcflows
from oppsched.testbed.nsbase import NetnsError
from oppsched.experiments.testbed.programs import TestbedError
from oppsched.experiments.testbed.schema import (flow_routes, is_wrc, mss_option, repeated,
                                                 resolved_ecn, wrc_packet_bytes, wrc_weight)
from oppsched.testbed.flows import BASE_PORT, FlowPlan, iperf_seconds
from oppsched.testbed.wired import ClientSpec, ServerSpec, TcpSettings, Topology, client_addr


def flow_plans(cfg: dict, clients, servers=None) -> list[FlowPlan]:
    """The flows: ports BASE_PORT + index, addresses from the built topology (`servers`
    gives the address a flow of repeated transfers, or an upstream flow, connects to)."""
    srv_idx = {s["name"]: i for i, s in enumerate(cfg["servers"])}
    dev_idx = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    plans = []
    for k, f in enumerate(cfg["flows"]):
        j = dev_idx[f["device"]]
        node = clients[j]
        addr = node.addr6 if f["family"] == "ipv6" else node.addr4
        stop = f["stop_s"] if f["stop_s"] is not None else cfg["duration_s"]
        rep = repeated(f)
        srv_addr = None
        if (rep or f["direction"] == "up") and servers is not None:
            sn = servers[srv_idx[f["server"]]]
            srv_addr = sn.addr6 if f["family"] == "ipv6" else sn.addr4
        if f["direction"] == "up":  # the iperf3 receiver listens in the server's namespace
            if srv_addr is None:
                raise ValueError(f"flow {f['id']}: direction up needs the servers' addresses")
            addr = srv_addr
        plans.append(FlowPlan(
            id=f["id"], server=f["server"], server_index=srv_idx[f["server"]],
            device=f["device"], device_index=j, family=f["family"], dst_addr=addr,
            port=BASE_PORT + k, start_s=f["start_s"],
            seconds=None if f["bytes"] is not None else iperf_seconds(f["start_s"], stop),
            nbytes=f["bytes"], cc=f["cc"] or cfg["tcp"]["congestion_control"],
            parallel=f["parallel"], interval_s=cfg["iperf"]["interval_s"],
            direction=f["direction"],
            repeat=dict(f["repeat"]) if rep else None, server_addr=srv_addr,
            seed=int(cfg["seed"]), stop_s=float(stop), transport=f["transport"],
            weight=wrc_weight(f) if is_wrc(f) else None,
            packet_bytes=wrc_packet_bytes(f) if is_wrc(f) else None,
            mss=mss_option(cfg, f)))
    return plans


def _route_ends(cfg: dict, clients, servers):
    """(route, server node, device node) of every host route of schema.flow_routes."""
    srv_idx = {s["name"]: i for i, s in enumerate(cfg["servers"])}
    dev_idx = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    for r in flow_routes(cfg):
        yield r, servers[srv_idx[r["server"]]], clients[dev_idx[r["device"]]]


def flow_route_commands(cfg: dict, clients, servers) -> list[tuple[object, list[str]]]:
    """(node, `ip` arguments) of the host routes that carry flows[].mss_bytes, initcwnd and
    ssthresh (schema.flow_routes): in the server's namespace to the device's address and in
    the device's to the server's, each next to the namespace's default route (via its
    gateway, or on its TUN). advmss is what each end advertises, so the MSS holds whichever
    end sends; initcwnd and ssthresh act at the sending end (ssthresh locked, so that the
    kernel's TCP metrics cache keeps it: oppsched.testbed.tcp_metrics). A server's route
    without a flow initcwnd takes tcp.initcwnd, as its default route does."""
    out = []
    for r, srv, dev in _route_ends(cfg, clients, servers):
        v6 = r["family"] == "ipv6"
        for node, peer, iw in ((srv, dev, r["initcwnd"] if r["initcwnd"] is not None
                                else cfg["tcp"]["initcwnd"]),
                               (dev, srv, r["initcwnd"])):
            gw = node.gw6 if v6 else node.gw4
            argv = (["-6"] if v6 else []) + ["route", "add",
                                             f"{peer.addr(v6)}/{128 if v6 else 32}"]
            argv += (["via", gw] if gw else []) + ["dev", node.dev]
            if r["advmss"] is not None:
                argv += ["advmss", str(r["advmss"])]
            if iw is not None:
                argv += ["initcwnd", str(iw)]
            if r["ssthresh"] is not None:
                argv += ["ssthresh", "lock", str(r["ssthresh"])]
            argv += _all_routes_attrs(cfg)
            out.append((node, argv))
    return out


def _all_routes_attrs(cfg: dict) -> list[str]:
    """The route attributes of every route of the servers and the devices: tcp.quickack
    and tcp.rto_min_ms (Linux takes a route's rto_min only when it is locked, and `ip`
    locks it without being asked: `ip route show` prints `rto_min lock 1s`; it refuses an
    explicit `lock` there)."""
    attrs = []
    if cfg["tcp"]["quickack"]:
        attrs += ["quickack", "1"]
    if cfg["tcp"]["rto_min_ms"] is not None:
        attrs += ["rto_min", f"{cfg['tcp']['rto_min_ms']}ms"]
    return attrs


def default_route_commands(cfg: dict, clients, servers) -> list[tuple[object, list[str]]]:
    """(node, `ip` arguments) that put tcp.initcwnd on the servers' default routes and
    tcp.quickack and tcp.rto_min_ms on the servers' and the devices' (the host routes of
    flow_route_commands carry them too): `ip route change`, which replaces the route's
    attributes, so one command per route carries all of them."""
    out = []
    for node, is_server in [(n, True) for n in servers] + [(n, False) for n in clients]:
        attrs = []
        if is_server and cfg["tcp"]["initcwnd"] is not None:
            attrs += ["initcwnd", str(cfg["tcp"]["initcwnd"])]
        attrs += _all_routes_attrs(cfg)
        if not attrs:
            continue
        for fam, gw, addr in (([], node.gw4, node.addr4), (["-6"], node.gw6, node.addr6)):
            if addr is None:
                continue
            out.append((node, fam + ["route", "change", "default"]
                        + (["via", gw] if gw else []) + ["dev", node.dev] + attrs))
    return out


def ssthresh_namespaces(cfg: dict, clients, servers) -> list:
    """The nodes (servers and devices) at either end of a route with an ssthresh: each gets
    the TCP metrics cache back on (tcp_metrics.SYSCTLS)."""
    nodes = {}
    for r, srv, dev in _route_ends(cfg, clients, servers):
        if r["ssthresh"] is not None:
            nodes.update({srv.name: srv, dev.name: dev})
    return list(nodes.values())


def prime_ssthresh(cfg: dict, clients, servers, timeout: float) -> list[dict]:
    """Before the flows: for every route with an ssthresh, one connection between its two
    ends fills their TCP metrics caches, and a second shows what a new connection starts
    with (oppsched.testbed.tcp_metrics.prime; TestbedError when not the ssthresh). One
    record per route for run.json: {server, device, family, flows, ssthresh, server_starts,
    client_starts, attempts}."""
    out = []
    for r, srv, dev in _route_ends(cfg, clients, servers):
        if r["ssthresh"] is None:
            continue
        v6 = r["family"] == "ipv6"
        try:
            got = tcp_metrics.prime(srv.ns.name, srv.addr(v6), dev.ns.name, dev.addr(v6), v6,
                                    r["ssthresh"], r["cc"], timeout=timeout)
        except NetnsError as exc:
            raise TestbedError(f"flows {', '.join(r['flows'])}: {exc}") from None
        out.append({"server": r["server"], "device": r["device"], "family": r["family"],
                    "flows": r["flows"], "ssthresh": r["ssthresh"],
                    "server_starts": got["server"], "client_starts": got["client"],
                    "attempts": got["attempts"]})
    return out


def wrc_flows(cfg: dict) -> list[tuple[int, dict]]:
    """(index, flow) of every wrc flow, the flow with its weight and packet size resolved."""
    return [(k, {**f, "weight": wrc_weight(f), "packet_bytes": wrc_packet_bytes(f)})
            for k, f in enumerate(cfg["flows"]) if is_wrc(f)]


def write_wrc_configs(cfg: dict, rundir, users) -> dict[str, tuple]:
    """The oppsched-wrc files of every wrc flow (oppsched.testbed.wrcflows), addressed as the
    daemons address the devices (`users`, daemon_users): {flow id: (send, recv)}."""
    dev_idx = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    out = {}
    for k, f in wrc_flows(cfg):
        stop = f["stop_s"] if f["stop_s"] is not None else cfg["duration_s"]
        out[f["id"]] = wrcflows.write_configs(f, cfg["wrc"], users[dev_idx[f["device"]]].addr4,
                                              BASE_PORT + k, stop - f["start_s"], rundir)
    return out


def testbed_topology(cfg: dict) -> Topology:
    """The namespaces, wired paths and TCP settings of the run (oppsched.testbed.wired.Testbed)."""
    t = cfg["tcp"]
    tcp = TcpSettings(congestion_control=t["congestion_control"], sack=t["sack"],
                      ecn=resolved_ecn(cfg), timestamps=t["timestamps"],
                      window_scaling=t["window_scaling"],
                      extra=tuple((str(k), str(v)) for k, v in t["extra"].items()))
    tp = cfg["topology"]
    return Topology(
        servers=tuple(ServerSpec(s["name"], s["rtt_ms"], s["rate_bps"], s["limit_bytes"])
                      for s in cfg["servers"]),
        clients=tuple(ClientSpec(d["name"]) for d in cfg["devices"]),
        tcp=tcp, ipv4=tp["ipv4"], ipv6=tp["ipv6"], wired=tp["wired"], client_links="tun",
        offloads=tp["offloads"], rt_priority=tp["rt_priority"], mtu=tp["mtu"],
        seccomp=cfg["security"]["seccomp"])


def tcp_override_sysctls(over: dict) -> dict:
    """The sysctls of a server's or device's `tcp` overrides (null: as tcp.*)."""
    m = {"sack": "net.ipv4.tcp_sack", "ecn": "net.ipv4.tcp_ecn",
         "timestamps": "net.ipv4.tcp_timestamps", "window_scaling": "net.ipv4.tcp_window_scaling"}
    return {m[k]: int(v) for k, v in over.items() if v is not None}


def daemon_users(cfg: dict) -> list[daemonconf.User]:
    """Users as the Testbed addresses them (wired.client_addr): id j = client namespace r{j}."""
    tp = cfg["topology"]
    return [daemonconf.User(j, d["name"], client_addr(j, False) if tp["ipv4"] else None,
                            client_addr(j, True) if tp["ipv6"] else None)
            for j, d in enumerate(cfg["devices"])]
