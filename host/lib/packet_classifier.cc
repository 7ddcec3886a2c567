// Downlink packet classification by destination address: see oppsched/packet_classifier.h.
#include "oppsched/packet_classifier.h"

#include <arpa/inet.h>

#include <algorithm>

namespace oppsched::ap {

std::optional<address_key> parse_address(const std::string& text) {
    address_key k{};
    if (::inet_pton(AF_INET, text.c_str(), k.data() + 1) == 1) {
        k[0] = 4;
        return k;
    }
    if (::inet_pton(AF_INET6, text.c_str(), k.data() + 1) == 1) {
        k[0] = 6;
        return k;
    }
    return std::nullopt;
}

std::optional<address_key> destination_of(const std::vector<std::uint8_t>& p) {
    if (p.empty()) return std::nullopt;
    address_key k{};
    const unsigned v = p[0] >> 4;
    if (v == 4 && p.size() >= 20 && (p[0] & 0x0f) >= 5) {
        k[0] = 4;
        std::copy(p.begin() + 16, p.begin() + 20, k.begin() + 1);
        return k;
    }
    if (v == 6 && p.size() >= 40) {
        k[0] = 6;
        std::copy(p.begin() + 24, p.begin() + 40, k.begin() + 1);
        return k;
    }
    return std::nullopt;
}

std::size_t packet_classifier::key_hash::operator()(const address_key& k) const {
    std::size_t h = 1469598103934665603ull;  // FNV-1a
    for (auto b : k) h = (h ^ b) * 1099511628211ull;
    return h;
}

std::optional<std::uint32_t> packet_classifier::add(const address_key& address,
                                                    std::uint32_t user) {
    const auto [it, inserted] = users_.emplace(address, user);
    if (inserted) return std::nullopt;
    return it->second;
}

packet_classifier::result packet_classifier::classify(
    const std::vector<std::uint8_t>& packet) const {
    const auto dst = destination_of(packet);
    if (!dst) return {outcome::malformed, 0};
    const auto it = users_.find(*dst);
    if (it == users_.end()) return {outcome::unknown_destination, 0};
    return {outcome::user, it->second};
}

}  // namespace oppsched::ap
