// Price-based AQMs: REM (Athuraliya, Low, Li, Yin 2001) and REAQM (Wang & Song, REAQM).
//
// Both keep a link price p, updated once per interval T, and mark each arrival with
// probability 1 - phi^-p. Units follow the ns-2 REM code that REAQM was compared against:
// queue length, input rate and capacity are all counted in packets of mean_packet_size bytes,
// the rates per interval T (x, y: bytes that arrived during T; c: bytes the link serves in T).
//
// REAQM can instead update at every arrival (price_update::per_arrival, aqm.h).
//
// There are no timers: the intervals that ended before an event are closed at that event
// (period_clock). The queue length at a period's end is the current one, since nothing has
// changed since the previous event. Intervals with no arrivals have y = 0, so the update is a
// constant step and k of them are applied in closed form, p <- [p + k step]+ (exact: with a
// constant step the [.]+ clamp can only bind once). While the capacity is unknown (measuring,
// no sample yet) the price is held.
#include <algorithm>
#include <cmath>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// Shared skeleton: period bookkeeping, probabilistic marking, stats.
class price_discipline : public fifo_discipline {
  public:
    price_discipline(const aqm_params& c, time_ns interval, double phi, double unit,
                     bool per_arrival = false)
        : fifo_discipline(c, true),
          clock_(interval),
          phi_(phi),
          unit_(unit),
          per_arrival_(per_arrival) {}

  protected:
    void advance(time_ns now) final {
        if (per_arrival_) return;
        const std::int64_t n = clock_.advance(now);
        if (n == 0) return;
        const double in = static_cast<double>(in_bytes_) / unit_;
        in_bytes_ = 0;
        if (!rate_.known()) return;
        const double c = packets_served_in(clock_.period());
        const double q = static_cast<double>(fifo_.bytes()) / unit_;
        close_periods(in, q, c, n);
        prob_ = 1.0 - std::pow(phi_, -price_);  // 1 - phi^-p
    }
    // Applies n updates: the first with `in` packets of input, the other n-1 with none.
    virtual void close_periods(double in, double q, double c, std::int64_t n) = 0;
    // One update at an arrival (per_arrival only): y packets arrived in a period in which the
    // link serves c; c_ref is what it serves in one update interval.
    virtual void arrival_update(double /*y*/, double /*q*/, double /*c*/, double /*c_ref*/) {}

    verdict decide(const ip_packet& pk, time_ns now) final {
        // Every arrival counts toward the input rate, including those the limit then drops
        // (the input rate is the offered load; ns-2 REM counts before the limit check).
        in_bytes_ += pk.size();
        if (per_arrival_) update_at_arrival(pk.size(), now);
        if (prob_ > 0.0 && uniform() < prob_) return verdict::signal;
        return verdict::accept;
    }
    void fill_stats(aqm_stats& s) const final {
        s.price = price_;
        s.drop_probability = prob_;
        s.input_rate = last_input_;
    }
    // Packets of the unit size the link serves in `span` (0 while the rate is unknown).
    double packets_served_in(time_ns span) const {
        return rate_.rate_bps() * to_seconds(span) / (8.0 * unit_);
    }

    double price_ = 0.0;
    double prob_ = 0.0;
    double last_input_ = 0.0;

  private:
    void update_at_arrival(std::size_t bytes, time_ns now) {
        const time_ns previous = last_arrival_;
        last_arrival_ = now;
        // The first arrival opens the first period; the price is held while c is unknown.
        if (previous < 0 || now <= previous || !rate_.known()) return;
        const double y = static_cast<double>(bytes) / unit_;
        const double c = packets_served_in(now - previous);
        const double c_ref = packets_served_in(clock_.period());
        const double q = static_cast<double>(fifo_.bytes()) / unit_;
        arrival_update(y, q, c, c_ref);
        last_input_ = y * c_ref / c;  // the same packets-per-T scale as the interval mode
        prob_ = 1.0 - std::pow(phi_, -price_);
    }

    period_clock clock_;
    double phi_;
    double unit_;
    bool per_arrival_;
    std::uint64_t in_bytes_ = 0;
    time_ns last_arrival_ = -1;
};

// REM: p <- [p + gamma (alpha (b - b*) + x - c)]+, x low-pass filtered with input_weight.
class rem_discipline final : public price_discipline {
  public:
    rem_discipline(const aqm_params& c, const rem_params& p)
        : price_discipline(c, p.update_interval, p.phi, p.mean_packet_size), p_(p) {}
    aqm_kind kind() const override { return aqm_kind::rem; }

  private:
    void close_periods(double in, double b, double c, std::int64_t n) override {
        const double w = p_.input_weight;
        auto step = [&](double x_in) {
            x_ = (1.0 - w) * x_ + w * x_in;
            price_ = std::max(0.0, price_ + p_.gamma * (p_.alpha * (b - p_.target) + x_ - c));
        };
        step(in);
        last_input_ = in;
        std::int64_t k = n - 1;
        // Empty periods: x decays geometrically; once it is negligible the step is constant.
        for (; k > 0 && x_ > 1e-12; --k) step(0.0);
        if (k > 0) {
            x_ = 0.0;
            const double s = p_.gamma * (p_.alpha * (b - p_.target) - c);
            price_ = std::max(0.0, price_ + static_cast<double>(k) * s);
        }
    }

    rem_params p_;
    double x_ = 0.0;  // filtered input rate
};

// REAQM: Wang & Song, REAQM, §3.1.
class reaqm_discipline final : public price_discipline {
  public:
    reaqm_discipline(const aqm_params& c, const reaqm_params& p)
        : price_discipline(c, p.update_interval, p.phi, p.mean_packet_size,
                           p.update == price_update::per_arrival),
          p_(p) {}
    aqm_kind kind() const override { return aqm_kind::reaqm; }

  private:
    // The change of p for y packets arriving in a period in which the link serves c (eqs. 2-5,
    // before the [.]+); c_ref scales the queue in f(q) and eq. 5.
    double delta(double y, double q, double c, double c_ref) const {
        if (p_.modified_update && y > c) {
            // Eq. 5: gamma (alpha' q (y - y0) / c + y - c), positive rate mismatch.
            const double y0 = p_.y0_ratio * c;
            return p_.gamma * (p_.alpha_prime * q * (y - y0) / c_ref + y - c);
        }
        // Eqs. 2-4: gamma (f(q) y - c), f(q) = alpha q / c + 1.
        const double f = p_.alpha * q / c_ref + 1.0;
        return p_.gamma * (f * y - c);
    }

    void close_periods(double y, double q, double c, std::int64_t n) override {
        price_ = std::max(0.0, price_ + delta(y, q, c, c));
        last_input_ = y;
        // The other n - 1 periods had y = 0: f(q) * 0 - c = -c each.
        if (n > 1) price_ = std::max(0.0, price_ - static_cast<double>(n - 1) * p_.gamma * c);
    }
    void arrival_update(double y, double q, double c, double c_ref) override {
        price_ = std::max(0.0, price_ + delta(y, q, c, c_ref));
    }

    reaqm_params p_;
};

}  // namespace

std::unique_ptr<queue_discipline> make_rem(const aqm_params& c, const rem_params& p) {
    return std::make_unique<rem_discipline>(c, p);
}
std::unique_ptr<queue_discipline> make_reaqm(const aqm_params& c, const reaqm_params& p) {
    return std::make_unique<reaqm_discipline>(c, p);
}

}  // namespace oppsched::aqm::detail
