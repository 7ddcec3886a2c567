#include "oppsched/station.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace oppsched::client {

void station_params::validate() const {
    if (buffer_packets < 1 || buffer_packets > 100000)
        throw std::invalid_argument("medium.station_buffer_packets: " +
                                    std::to_string(buffer_packets) + " not in [1, 100000]");
    if (harq_processes < 1 || harq_processes > 16)
        throw std::invalid_argument("medium.harq_processes: " + std::to_string(harq_processes) +
                                    " not in [1, 16]");
    if (status_period <= 0)
        throw std::invalid_argument("medium.status_period_ms: " +
                                    std::to_string(static_cast<double>(status_period) / kNsPerMs) +
                                    " not > 0");
}

namespace {
pdu::segmenter_params seg_params(const station_params& p) {
    pdu::segmenter_params s;
    s.user = p.user;
    s.format = p.format;
    return s;
}
}  // namespace

station::station(station_params p) : p_((p.validate(), p)), seg_(seg_params(p_)) {
    procs_.resize(p_.harq_processes);
}

std::uint64_t station::buffered_bytes() const { return queued_bytes_ + seg_.partial_remaining(); }

bool station::on_packet(time_ns now, std::vector<std::uint8_t> packet) {
    ++stats_.packets_in;
    stats_.bytes_in += packet.size();
    if (queue_.size() >= p_.buffer_packets) {
        ++stats_.dropped_full;
        return false;
    }
    ip_packet pk;
    pk.data = std::move(packet);
    pk.user = p_.user;
    pk.id = next_id_++;
    pk.arrival = now;
    queued_bytes_ += pk.size();
    queue_.push_back(std::move(pk));
    return true;
}

std::optional<wire::uplink_tb> station::on_grant(time_ns now, const wire::uplink_grant& g) {
    (void)now;
    if (g.user != p_.user || g.harq_pid >= procs_.size()) {
        ++stats_.grants_rejected;
        return std::nullopt;
    }
    ++stats_.grants;
    auto& pr = procs_[g.harq_pid];
    const bool repeat = pr.used && pr.ndi == g.ndi;
    if (repeat && pr.tb.size() != g.tb_bytes) {  // a retransmission keeps its TB's size
        ++stats_.grants_rejected;
        return std::nullopt;
    }
    if (!repeat) {
        std::vector<std::uint8_t> tb;
        try {
            const std::size_t tag = p_.integrity_key ? integrity::kTagBytes : 0;
            if (g.tb_bytes <= tag) throw std::invalid_argument("no room for the tag");
            tb = std::move(seg_.build(g.tb_bytes - tag,
                                      [this]() -> std::optional<ip_packet> {
                                          if (queue_.empty()) return std::nullopt;
                                          ip_packet pk = std::move(queue_.front());
                                          queue_.pop_front();
                                          queued_bytes_ -= pk.size();
                                          return pk;
                                      })
                               .bytes);
        } catch (const std::invalid_argument&) {  // no PDU (and its tag) fits tb_bytes
            ++stats_.grants_rejected;
            return std::nullopt;
        }
        if (p_.integrity_key) integrity::append_tag(*p_.integrity_key, tb);
        pr.used = true;
        pr.ndi = g.ndi;
        pr.tb = std::move(tb);
        ++stats_.tbs_new;
    } else {
        ++stats_.tbs_repeated;
    }
    last_grant_slot_ = std::max(last_grant_slot_, g.slot);
    wire::uplink_tb out;
    out.user = p_.user;
    out.slot = g.slot;
    out.harq_pid = g.harq_pid;
    out.ndi = g.ndi;
    out.buffer_bytes = buffered_bytes();
    out.buffer_packets = queue_.size();
    out.tb = pr.tb;
    ap_thinks_empty_ = out.buffer_bytes == 0;
    last_report_ = now;
    return out;
}

std::optional<time_ns> station::next_status_due() const {
    if (buffered_bytes() == 0) return std::nullopt;
    if (ap_thinks_empty_ || !last_report_) return time_ns{0};  // now
    return *last_report_ + p_.status_period;
}

std::optional<wire::buffer_status> station::take_status(time_ns now) {
    const auto due = next_status_due();
    if (!due || *due > now) return std::nullopt;
    wire::buffer_status s;
    s.user = p_.user;
    s.last_grant_slot = last_grant_slot_;
    s.buffer_bytes = buffered_bytes();
    s.buffer_packets = queue_.size();
    ap_thinks_empty_ = false;
    last_report_ = now;
    ++stats_.status_reports;
    return s;
}

}  // namespace oppsched::client
