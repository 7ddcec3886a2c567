"""`oppsched plugin new scheduler|aqm NAME [--dir DIR]`: a ready out-of-tree CMake project of
a scheduler or AQM plugin in C++ (docs/extending.md, "C++ plugins").

The project holds CMakeLists.txt (it finds host/include/oppsched/plugin_api.h of the checkout
the command ran from, a path it writes in; -DOPPSCHED_INCLUDE_DIR=... points it elsewhere),
NAME.cc (a working example: a round robin that uses the user views, served() and a param, or
an AQM marking above a queue threshold) and a README with the commands that build it and check
it in an experiment. The library it builds, build/libNAME.so, is what an experiment's
`scheduler:` (or `aqm:`) `{kind: plugin, library: ...}` names.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from oppsched import paths

FAMILIES = ("scheduler", "aqm")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")

_CMAKE = """\
# The {family} plugin {name} (oppsched docs/extending.md, "C++ plugins"): builds
# build/lib{name}.so, which an experiment names as {family}: {{kind: plugin, library: ...}}.
cmake_minimum_required(VERSION 3.16)
project({name} LANGUAGES CXX)

# The folder holding oppsched/plugin_api.h: the checkout `oppsched plugin new` ran from.
set(OPPSCHED_INCLUDE_DIR "{include}" CACHE PATH "the folder holding oppsched/plugin_api.h")
if(NOT EXISTS "${{OPPSCHED_INCLUDE_DIR}}/oppsched/plugin_api.h")
  message(FATAL_ERROR "OPPSCHED_INCLUDE_DIR: ${{OPPSCHED_INCLUDE_DIR}} has no "
                      "oppsched/plugin_api.h; pass -DOPPSCHED_INCLUDE_DIR=<checkout>/host/include")
endif()
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()

# MODULE: a library for dlopen only. Only oppsched_plugin_entry is exported.
add_library({name} MODULE {name}.cc)
target_include_directories({name} PRIVATE "${{OPPSCHED_INCLUDE_DIR}}")
set_target_properties({name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                                        CXX_VISIBILITY_PRESET hidden)
target_compile_options({name} PRIVATE -Wall -Wextra)
"""

_SOURCE = """\
// The scheduler plugin {name}: round robin among the slot's candidates whose rate is at least
// min_rate_bps (default 0: every candidate), the least recently served first.
//
// The interface is oppsched/plugin_api.h (docs/extending.md, "C++ plugins"). Every slot that
// is free for new data, select() gets the candidates (users with queued data, a usable rate
// and a free HARQ process) in id order and answers an index into them, or OPPSCHED_NO_USER.
// served() tells which user had the slot, HARQ retransmissions included. A select() that
// throws, answers something else or takes longer than the budget is replaced by the built-in
// PF for that slot, and counted (scheduler.plugin_* in the run's stats).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "oppsched/plugin_api.h"

namespace {{

class policy {{
  public:
    // params: the experiment's scheduler.params. Throw to refuse them: `oppsched check`
    // and the apd print the message.
    policy(const oppsched::plugin_params& params, std::size_t num_users)
        : min_rate_bps_(params.number("min_rate_bps", 0.0)), last_served_(num_users, -1) {{
        if (!(min_rate_bps_ >= 0.0)) {{
            char why[80];
            std::snprintf(why, sizeof why, "min_rate_bps: %g must be >= 0", min_rate_bps_);
            throw std::invalid_argument(why);
        }}
    }}

    std::int64_t select(std::int64_t /*slot*/, const oppsched_user_view* users, std::size_t n) {{
        std::int64_t best = OPPSCHED_NO_USER;
        for (std::size_t k = 0; k < n; ++k) {{
            if (users[k].rate_bps < min_rate_bps_) continue;
            // the least recently served; never served (-1) first, then the lower id
            if (best == OPPSCHED_NO_USER ||
                served_at(users[k].id) < served_at(users[static_cast<std::size_t>(best)].id))
                best = static_cast<std::int64_t>(k);
        }}
        return best;
    }}

    void served(std::int64_t slot, std::int64_t user, std::uint64_t /*bytes*/) {{
        if (user == OPPSCHED_NO_USER) return;
        const auto u = static_cast<std::size_t>(user);
        if (u >= last_served_.size()) last_served_.resize(u + 1, -1);
        last_served_[u] = slot;
    }}

    void set_num_users(std::size_t n) {{ last_served_.resize(n, -1); }}

  private:
    std::int64_t served_at(std::uint32_t id) const {{
        return id < last_served_.size() ? last_served_[id] : -1;
    }}

    double min_rate_bps_;
    std::vector<std::int64_t> last_served_;  // slot of each user's last service, -1: never
}};

}}  // namespace

// oppsched_plugin_entry: ABI version, family, name "{name}" and the function table.
OPPSCHED_SCHEDULER_PLUGIN(policy, "{name}")
"""

_AQM_SOURCE = """\
// The AQM plugin {name}: a threshold on the queue, the simplest early signal. An arriving
// packet that finds threshold_packets or more packets queued is marked (CE) if it can be,
// else dropped; every leaving packet is sent.
//
// The interface is oppsched/plugin_api.h (docs/extending.md, "AQM plugins in C++"). Each
// user's queue has its own instance on a drop-tail FIFO with the queue's limits: enqueue()
// answers ACCEPT, DROP (an early_drop) or MARK (CE on an ECN-capable packet when aqm.ecn is on,
// an early_drop otherwise); dequeue() answers SEND, DROP (an aqm_drop) or MARK; on_empty() is
// told when a dequeue finds the queue empty. A packet beyond the limit is an overflow, as in
// drop-tail.
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "oppsched/plugin_api.h"

namespace {{

class aqm {{
  public:
    // params: the experiment's aqm.params. Throw to refuse them: `oppsched check` and the
    // apd print the message.
    explicit aqm(const oppsched::plugin_params& params)
        : threshold_(params.number("threshold_packets", 20.0)) {{
        if (!(threshold_ >= 1.0)) {{
            char why[80];
            std::snprintf(why, sizeof why, "threshold_packets: %g must be >= 1", threshold_);
            throw std::invalid_argument(why);
        }}
    }}

    std::int32_t enqueue(const oppsched_packet_view& /*pkt*/, const oppsched_queue_view& queue,
                         double /*now_s*/) {{
        return static_cast<double>(queue.packets) >= threshold_ ? OPPSCHED_AQM_MARK
                                                                : OPPSCHED_AQM_ACCEPT;
    }}

    std::int32_t dequeue(const oppsched_packet_view& /*pkt*/, const oppsched_queue_view& /*queue*/,
                         double /*now_s*/) {{
        return OPPSCHED_AQM_SEND;
    }}

    void on_empty(const oppsched_queue_view& /*queue*/, double /*now_s*/) {{}}

  private:
    double threshold_;
}};

}}  // namespace

// oppsched_plugin_entry: ABI version, family, name "{name}" and the function table.
OPPSCHED_AQM_PLUGIN(aqm, "{name}")
"""

_README = """\
# {name}: an oppsched {family} plugin

{name}.cc is {what} to start from; the interface is
{include}/oppsched/plugin_api.h and docs/extending.md ("C++ plugins") describes it.

    cmake -S {dir} -B {dir}/build
    cmake --build {dir}/build
    oppsched check my-experiment.yaml

with, in my-experiment.yaml (a relative library is relative to the experiment file):

    {section}: {{kind: plugin, library: {library}, params: {{{param}}}}}

`oppsched check` (and the apd) refuse a library they cannot use, naming {section}.library,
the path and the reason (a library built against another ABI version, a missing entry point,
params the plugin refuses).
"""


def write_project(family: str, name: str, directory: Path,
                  include_dir: Path | None = None) -> list[Path]:
    """Writes the project into `directory` (created; it must not exist or be empty) and returns
    the files written. ValueError naming the argument and the value when one cannot be used."""
    if family not in FAMILIES:
        raise ValueError(f"family: {family!r} not one of {', '.join(FAMILIES)}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"NAME: {name!r} is not a C identifier of at most 40 characters "
                         "(letters, digits, _; not starting with a digit)")
    include = (include_dir or paths.home() / "host" / "include").resolve()
    if not (include / "oppsched" / "plugin_api.h").is_file():
        raise ValueError(f"the header: {include / 'oppsched' / 'plugin_api.h'} does not exist")
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"--dir: {directory} exists and is not an empty folder")
    directory.mkdir(parents=True, exist_ok=True)
    library = f"{directory}/build/lib{name}.so"
    scheduler = family == "scheduler"
    files = {
        "CMakeLists.txt": _CMAKE.format(name=name, include=include, family=family),
        f"{name}.cc": (_SOURCE if scheduler else _AQM_SOURCE).format(name=name),
        "README.md": _README.format(
            name=name, include=include, dir=directory, library=library, family=family,
            section=family, what="a round robin" if scheduler else "a queue threshold",
            param="min_rate_bps: 0" if scheduler else "threshold_packets: 20"),
    }
    out = []
    for fname, text in files.items():
        p = directory / fname
        p.write_text(text)
        out.append(p)
    return out


def _cmd_new(a) -> int:
    directory = Path(a.dir) if a.dir else Path(a.name)
    try:
        files = write_project(a.family, a.name, directory)
    except ValueError as exc:
        print(f"oppsched plugin new: {exc}", file=sys.stderr)
        return 2
    for p in files:
        print(p)
    print(f"build: cmake -S {directory} -B {directory}/build && cmake --build {directory}/build"
          f"  ->  {directory}/build/lib{a.name}.so")
    return 0


def add_parser(group) -> argparse.ArgumentParser:
    """`new` in the `plugin` command group (`group`: its subparsers)."""
    n = group.add_parser("new", help="write a ready out-of-tree CMake project of a C++ "
                         "scheduler or AQM plugin (docs/extending.md, \"C++ plugins\")")
    n.add_argument("family", choices=FAMILIES, help="the plugin's family")
    n.add_argument("name", help="the plugin's name: the library is build/libNAME.so")
    n.add_argument("--dir", help="the project's folder (default: ./NAME); must not exist or "
                   "be empty")
    n.set_defaults(fn=_cmd_new)
    return n
