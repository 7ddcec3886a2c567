#pragma once
// Which user a downlink IP packet is for: its destination address (IPv4 or IPv6), looked up
// among the addresses each user was configured with. Only the IP header is read, so a
// packet whose transport header is odd still has a destination. O(1) per packet: one hash
// of 17 bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace oppsched::ap {

// An address as 17 bytes: the IP version (4 or 6), then 16 address bytes (IPv4 in the
// first 4, the rest 0).
using address_key = std::array<std::uint8_t, 17>;

// "10.0.0.1" or "fd00::1"; nullopt if the text is neither.
std::optional<address_key> parse_address(const std::string& text);
// The destination of an IPv4 (header of at least 20 bytes, IHL >= 5) or IPv6 (at least 40
// bytes) packet; nullopt for anything else.
std::optional<address_key> destination_of(const std::vector<std::uint8_t>& packet);

class packet_classifier final {
  public:
    enum class outcome { user, malformed, unknown_destination };
    struct result {
        outcome what = outcome::malformed;
        std::uint32_t user = 0;  // when what == user
    };

    // Maps `address` to `user`. If the address already belongs to a user, nothing changes
    // and that user is returned.
    std::optional<std::uint32_t> add(const address_key& address, std::uint32_t user);
    result classify(const std::vector<std::uint8_t>& packet) const;
    std::size_t size() const { return users_.size(); }

  private:
    struct key_hash {
        std::size_t operator()(const address_key& k) const;
    };
    std::unordered_map<address_key, std::uint32_t, key_hash> users_;
};

}  // namespace oppsched::ap
