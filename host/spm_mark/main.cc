// oppsched-spm-mark: attaches SPM-AF's sender-side marker (spm_mark.bpf.c, embedded in this
// program) to the TC egress of an interface of the network namespace it runs in, with its
// parameters, and exits; the kernel keeps the program while the interface (or the
// namespace) exists. The orchestration runs it in each server namespace
// (`ip netns exec S oppsched-spm-mark --dev eth0 ...`, docs/testbed.md).
//
//   oppsched-spm-mark --dev DEV [--cwnd-below N] [--dscp D]   attach (replacing ours)
//   oppsched-spm-mark --dev DEV --detach                      remove it
//   ... --check                                               validate the arguments only
//
// Attachment: a clsact qdisc (created if missing, left in place), and a direct-action
// cls_bpf filter at handle kHandle, priority kPriority on its egress hook, replaced if it
// exists; other filters are not touched. The link-layer header length the program skips
// (14 on Ethernet, 0 on a TUN) comes from the interface's type (/sys/class/net/DEV/type).
//
// Exit status: 0 done, 2 bad arguments, 1 the kernel refused (the message says why: no
// such device, no BPF support, not root).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "spm_mark_config.h"
#include "spm_mark_object.h"

namespace {

constexpr const char* kProg = "oppsched-spm-mark";
constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 1;
constexpr unsigned kHandle = 0x5350;  // "SP"
constexpr unsigned kPriority = 1;     // first on the egress hook
constexpr unsigned kArphrdEther = 1, kArphrdLoopback = 772, kArphrdNone = 65534;

struct options {
    std::string dev;
    spm_mark_config cfg{SPM_MARK_DEFAULT_CWND_BELOW, SPM_MARK_DEFAULT_DSCP,
                        SPM_MARK_DEFAULT_L2_LEN};
    bool detach = false, check = false, verbose = false;
};

void usage(std::FILE* f) {
    std::fprintf(f,
                 "usage: %s --dev DEV [--cwnd-below N] [--dscp D] [--detach] [--check] "
                 "[--verbose]\n"
                 "  --dev DEV         interface of this network namespace (egress is marked)\n"
                 "  --cwnd-below N    mark TCP data sent while snd_cwnd < N segments "
                 "(default %d; 0..65535, 0 never marks)\n"
                 "  --dscp D          the DSCP written (default %d; 0..63)\n"
                 "  --detach          remove the marker from DEV instead\n"
                 "  --check           validate the arguments and exit\n",
                 kProg, SPM_MARK_DEFAULT_CWND_BELOW, SPM_MARK_DEFAULT_DSCP);
}

[[noreturn]] void fail(int code, const char* fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "%s: error: ", kProg);
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::exit(code);
}

unsigned long parse_uint(const char* opt, const char* s, unsigned long max) {
    char* end = nullptr;
    errno = 0;
    const unsigned long v = std::strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > max)
        fail(kExitUsage, "%s: '%s' is not an integer in [0, %lu]", opt, s, max);
    return v;
}

options parse_args(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) fail(kExitUsage, "%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "--dev") {
            o.dev = value();
        } else if (a == "--cwnd-below") {
            o.cfg.cwnd_below = static_cast<__u32>(parse_uint("--cwnd-below", value(), 65535));
        } else if (a == "--dscp") {
            o.cfg.dscp = static_cast<__u32>(parse_uint("--dscp", value(), 63));
        } else if (a == "--detach") {
            o.detach = true;
        } else if (a == "--check") {
            o.check = true;
        } else if (a == "--verbose") {
            o.verbose = true;
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        } else {
            usage(stderr);
            fail(kExitUsage, "unknown argument '%s'", a.c_str());
        }
    }
    if (o.dev.empty() || o.dev.size() >= IF_NAMESIZE)
        fail(kExitUsage, "--dev: '%s' is not an interface name", o.dev.c_str());
    return o;
}

// Bytes before the IP header at TC egress, from the interface's ARPHRD type.
std::optional<__u32> link_header_len(const std::string& dev) {
    std::ifstream in("/sys/class/net/" + dev + "/type");
    unsigned type = 0;
    if (!(in >> type)) return std::nullopt;
    if (type == kArphrdEther || type == kArphrdLoopback) return 14;
    if (type == kArphrdNone) return 0;
    fail(kExitRuntime, "--dev %s: link type %u is neither Ethernet nor a TUN (no header)",
         dev.c_str(), type);
}

bool g_verbose = false;
bool g_quiet = false;  // around calls whose errors are expected (clsact exists, no filter)
int print_libbpf(enum libbpf_print_level level, const char* fmt, std::va_list ap) {
    if ((level == LIBBPF_DEBUG || g_quiet) && !g_verbose) return 0;
    return std::vfprintf(stderr, fmt, ap);
}

bpf_tc_hook egress_hook(int ifindex) {
    bpf_tc_hook h{};
    h.sz = sizeof(h);
    h.ifindex = ifindex;
    h.attach_point = BPF_TC_EGRESS;
    return h;
}

bpf_tc_opts filter_opts(int prog_fd) {
    bpf_tc_opts o{};
    o.sz = sizeof(o);
    o.handle = kHandle;
    o.priority = kPriority;
    o.prog_fd = prog_fd;
    o.flags = prog_fd > 0 ? BPF_TC_F_REPLACE : 0;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    options o = parse_args(argc, argv);
    if (o.check) return 0;
    g_verbose = o.verbose;
    libbpf_set_print(print_libbpf);

    const int ifindex = static_cast<int>(if_nametoindex(o.dev.c_str()));
    if (ifindex == 0)
        fail(kExitRuntime, "--dev %s: no such interface in this network namespace", o.dev.c_str());
    bpf_tc_hook hook = egress_hook(ifindex);

    if (o.detach) {
        bpf_tc_opts f = filter_opts(0);
        g_quiet = true;
        const int err = bpf_tc_detach(&hook, &f);
        g_quiet = false;
        if (err && err != -ENOENT)
            fail(kExitRuntime, "detaching from %s: %s", o.dev.c_str(), std::strerror(-err));
        std::printf("%s: %s: %s\n", kProg, o.dev.c_str(), err ? "no marker attached" : "detached");
        return 0;
    }

    const auto l2 = link_header_len(o.dev);
    if (!l2) fail(kExitRuntime, "--dev %s: cannot read its link type", o.dev.c_str());
    o.cfg.l2_len = *l2;

    bpf_object_open_opts oo{};
    oo.sz = sizeof(oo);
    oo.object_name = "spm_mark";
    bpf_object* obj = bpf_object__open_mem(kSpmMarkObject, kSpmMarkObjectSize, &oo);
    if (!obj) fail(kExitRuntime, "opening the embedded BPF object: %s", std::strerror(errno));
    bpf_map* rodata = nullptr;
    bpf_map* m = nullptr;
    bpf_object__for_each_map(m, obj) {
        const char* n = bpf_map__name(m);
        const std::size_t len = std::strlen(n);
        if (bpf_map__is_internal(m) && len >= 7 && std::strcmp(n + len - 7, ".rodata") == 0)
            rodata = m;
    }
    if (!rodata) fail(kExitRuntime, "the BPF object has no .rodata (spm_mark_config)");
    if (int err = bpf_map__set_initial_value(rodata, &o.cfg, sizeof(o.cfg)))
        fail(kExitRuntime, "setting the configuration: %s (is .rodata exactly spm_mark_config?)",
             std::strerror(-err));
    if (int err = bpf_object__load(obj))
        fail(kExitRuntime, "loading the BPF program: %s (needs root and a kernel with BPF)",
             std::strerror(-err));
    bpf_program* prog = bpf_object__find_program_by_name(obj, "spm_mark");
    if (!prog) fail(kExitRuntime, "the BPF object has no program spm_mark");

    g_quiet = true;
    int err = bpf_tc_hook_create(&hook);
    g_quiet = false;
    if (err && err != -EEXIST)
        fail(kExitRuntime, "creating the clsact qdisc on %s: %s", o.dev.c_str(),
             std::strerror(-err));
    bpf_tc_opts f = filter_opts(bpf_program__fd(prog));
    err = bpf_tc_attach(&hook, &f);
    if (err) fail(kExitRuntime, "attaching to %s egress: %s", o.dev.c_str(), std::strerror(-err));
    std::printf(
        "%s: %s egress: marking TCP data sent while snd_cwnd < %u with DSCP %u "
        "(link header %u bytes, program id %u)\n",
        kProg, o.dev.c_str(), o.cfg.cwnd_below, o.cfg.dscp, o.cfg.l2_len, f.prog_id);
    bpf_object__close(obj);  // the filter holds the program
    return 0;
}
