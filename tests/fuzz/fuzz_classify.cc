// Fuzz target: the AP's downlink classification (host packet_classifier.h): destination_of
// on the IP packets the TUN device hands the apd (any local program may write them), and
// packet_classifier::classify over a table of users.
// Input: a byte n (low 3 bits: up to 7 users), then n user addresses (a byte: IPv4 or IPv6,
// then 4 or 16 address bytes), then the packet. Bit 3 of the first byte puts a configured
// address into the packet's destination field (IPv4 or IPv6 by bit 4) so lookups hit.
// Invariants: destination_of never reads past the packet (an exact-size copy); it returns a
// key only for an IPv4 packet of >= 20 bytes with IHL >= 5 or an IPv6 packet of >= 40 bytes,
// and then the key is the version and the destination field, the rest of the key 0;
// classify agrees with destination_of and the table: user only for a configured address
// (and then that address's user), unknown_destination for any other destination, malformed
// exactly when destination_of has none.
#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/packet_classifier.h"

using namespace oppsched;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::input_reader in(data, size);
    const std::uint8_t control = in.u8();
    ap::packet_classifier pc;
    std::map<ap::address_key, std::uint32_t> table;
    std::vector<ap::address_key> addrs;
    const int users = control & 7u;
    for (int u = 0; u < users; ++u) {
        ap::address_key k{};
        const bool v6 = in.boolean();
        k[0] = v6 ? 6 : 4;
        for (int i = 0; i < (v6 ? 16 : 4); ++i) k[1 + i] = in.u8();
        const auto prev = pc.add(k, static_cast<std::uint32_t>(u));
        const auto [it, inserted] = table.emplace(k, static_cast<std::uint32_t>(u));
        FUZZ_CHECK(inserted == !prev.has_value(), "add reports an address already taken");
        if (prev) FUZZ_CHECK(*prev == it->second, "add returns the address's first user");
        addrs.push_back(k);
    }
    FUZZ_CHECK(pc.size() == table.size(), "one entry per address");
    std::vector<std::uint8_t> p = in.bytes(in.remaining());
    if ((control & 8u) && !addrs.empty() && !p.empty()) {
        const auto& k = addrs[p[0] % addrs.size()];
        if (k[0] == 4 && p.size() >= 20) {
            p[0] = static_cast<std::uint8_t>(0x40 | std::max(5, p[0] & 0x0f));
            std::copy(k.begin() + 1, k.begin() + 5, p.begin() + 16);
        } else if (k[0] == 6 && p.size() >= 40) {
            p[0] = static_cast<std::uint8_t>(0x60 | (p[0] & 0x0f));
            std::copy(k.begin() + 1, k.end(), p.begin() + 24);
        }
    }
    // An exact-size heap copy (std::vector's data), so an overread leaves the allocation.
    const std::vector<std::uint8_t> packet(p);
    const auto dst = ap::destination_of(packet);
    const unsigned version = packet.empty() ? 0 : packet[0] >> 4;
    const bool v4 = version == 4 && packet.size() >= 20 && (packet[0] & 0x0f) >= 5;
    const bool v6 = version == 6 && packet.size() >= 40;
    FUZZ_CHECK(dst.has_value() == (v4 || v6), "a destination exactly for a whole IP header");
    if (dst) {
        ap::address_key want{};
        want[0] = v4 ? 4 : 6;
        if (v4)
            std::copy(packet.begin() + 16, packet.begin() + 20, want.begin() + 1);
        else
            std::copy(packet.begin() + 24, packet.begin() + 40, want.begin() + 1);
        FUZZ_CHECK(*dst == want, "the key is the version and the destination field");
    }
    const auto r = pc.classify(packet);
    using o = ap::packet_classifier::outcome;
    if (!dst) {
        FUZZ_CHECK(r.what == o::malformed, "no destination: malformed");
        return 0;
    }
    const auto it = table.find(*dst);
    if (it == table.end()) {
        FUZZ_CHECK(r.what == o::unknown_destination, "an address not configured is unknown");
    } else {
        FUZZ_CHECK(r.what == o::user && r.user == it->second,
                   "a configured address gives its user");
    }
    return 0;
}
