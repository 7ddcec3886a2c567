// Link adaptation tables and OLLA (see oppsched/linkadapt.h for sources and invariants).
#include "oppsched/linkadapt.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "oppsched/validation.h"

namespace oppsched::linkadapt {
namespace {

// Srinivasan & Baras, Table I, "Transmission rate per slot as a function of SNR", exactly as
// printed.
struct evdo_row {
    double snr_db;
    double rate_bps;
    const char* name;
};
constexpr evdo_row kEvdo[] = {
    {-12.5, 38400.0, "EV-DO 38.4 kb/s"},   {-9.5, 76800.0, "EV-DO 76.8 kb/s"},
    {-6.5, 153600.0, "EV-DO 153.6 kb/s"},  {-5.7, 204800.0, "EV-DO 204.8 kb/s"},
    {-4.0, 307200.0, "EV-DO 307.2 kb/s"},  {-1.0, 614400.0, "EV-DO 614.4 kb/s"},
    {1.3, 921600.0, "EV-DO 921.6 kb/s"},   {3.0, 1228800.0, "EV-DO 1228.8 kb/s"},
    {7.2, 1843200.0, "EV-DO 1843.2 kb/s"}, {9.5, 2457600.0, "EV-DO 2457.6 kb/s"},
};

// Provisional OFDM thresholds, see linkadapt.h (802.11a/n sensitivities + 91 - 5 dB).
struct ofdm_row {
    const char* name;
    std::uint32_t bits_per_symbol;
    double code_rate;
    double snr_db;
};
constexpr ofdm_row kOfdm[] = {
    {"BPSK 1/2", 1, 1.0 / 2, 4.0},   {"QPSK 1/2", 2, 1.0 / 2, 7.0},
    {"QPSK 3/4", 2, 3.0 / 4, 9.0},   {"16QAM 1/2", 4, 1.0 / 2, 12.0},
    {"16QAM 3/4", 4, 3.0 / 4, 16.0}, {"64QAM 2/3", 6, 2.0 / 3, 20.0},
    {"64QAM 3/4", 6, 3.0 / 4, 21.0}, {"64QAM 5/6", 6, 5.0 / 6, 22.0},
};

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

std::vector<std::string_view> split_commas(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    for (;;) {
        const std::size_t comma = line.find(',', start);
        out.push_back(trim(line.substr(start, comma - start)));
        if (comma == std::string_view::npos) return out;
        start = comma + 1;
    }
}

bool parse_double(std::string_view s, double& out) {
    const std::string tmp(s);
    if (tmp.empty()) return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtod(tmp.c_str(), &end);
    return errno == 0 && end == tmp.c_str() + tmp.size() && std::isfinite(out);
}

bool parse_uint(std::string_view s, std::uint32_t& out) {
    if (s.empty() || s.size() > 9) return false;
    std::uint32_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<std::uint32_t>(c - '0');
    }
    out = v;
    return true;
}

}  // namespace

mcs_table::mcs_table(std::string name, std::vector<mcs_entry> entries)
    : name_(std::move(name)), entries_(std::move(entries)) {
    if (entries_.empty()) throw_invalid("linkadapt.table: no entries");
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        const mcs_entry& e = entries_[i];
        const std::string field = "linkadapt.table[" + std::to_string(i) + "].";
        if (e.name.empty() || e.name.find_first_of(",\n\r") != std::string::npos) {
            throw_invalid(field + "name: '" + e.name + "' empty or contains a comma/newline");
        }
        if (!std::isfinite(e.min_snr_db))
            throw_invalid(field + "min_snr_db: " + format_number(e.min_snr_db) + " not finite");
        if (!(e.rate_bps > 0.0 && std::isfinite(e.rate_bps))) {
            throw_invalid(field + "rate_bps: " + format_number(e.rate_bps) + " not > 0 and finite");
        }
        if (!(e.code_rate >= 0.0 && e.code_rate <= 1.0)) {
            throw_invalid(field + "code_rate: " + format_number(e.code_rate) + " not in [0,1]");
        }
        if (i == 0) continue;
        // Monotone: a better channel never gets a lower rate, and select() can bisect.
        const mcs_entry& prev = entries_[i - 1];
        if (!(e.min_snr_db > prev.min_snr_db)) {
            throw_invalid(field + "min_snr_db: " + format_number(e.min_snr_db) +
                          " not > previous " + format_number(prev.min_snr_db));
        }
        if (!(e.rate_bps > prev.rate_bps)) {
            throw_invalid(field + "rate_bps: " + format_number(e.rate_bps) + " not > previous " +
                          format_number(prev.rate_bps));
        }
    }
}

mcs_table mcs_table::evdo() {
    std::vector<mcs_entry> rows;
    for (const evdo_row& r : kEvdo) rows.push_back(mcs_entry{r.name, r.snr_db, r.rate_bps, 0, 0.0});
    return mcs_table("evdo", std::move(rows));
}

mcs_table mcs_table::ofdm_provisional(const ofdm_numerology& num_) {
    if (!(num_.sample_rate_hz > 0.0 && std::isfinite(num_.sample_rate_hz))) {
        throw_invalid("linkadapt.ofdm.sample_rate_hz: " + format_number(num_.sample_rate_hz) +
                      " not > 0");
    }
    if (num_.fft_size == 0 || num_.data_subcarriers == 0 || num_.data_subcarriers > num_.fft_size) {
        throw_invalid("linkadapt.ofdm.data_subcarriers: " + std::to_string(num_.data_subcarriers) +
                      " not in [1, fft_size " + std::to_string(num_.fft_size) + "]");
    }
    std::vector<mcs_entry> rows;
    for (const ofdm_row& r : kOfdm) {
        // Information bits per OFDM symbol x symbols per second.
        const double rate =
            num_.data_subcarriers * r.bits_per_symbol * r.code_rate * num_.symbol_rate();
        rows.push_back(mcs_entry{r.name, r.snr_db, rate, r.bits_per_symbol, r.code_rate});
    }
    return mcs_table("ofdm_provisional", std::move(rows));
}

expected<mcs_table> mcs_table::from_csv(std::string_view text, std::string name) {
    std::vector<mcs_entry> rows;
    int col_name = -1, col_snr = -1, col_rate = -1, col_bits = -1, col_code = -1;
    std::size_t ncols = 0;
    bool have_header = false;
    std::size_t line_no = 0;
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        const std::string_view raw = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        ++line_no;
        const std::string_view line = trim(raw);
        if (line.empty() || line.front() == '#') continue;
        const std::string where = "linkadapt.csv line " + std::to_string(line_no) + ": ";
        const auto fields = split_commas(line);
        if (!have_header) {
            for (std::size_t i = 0; i < fields.size(); ++i) {
                const int c = static_cast<int>(i);
                if (fields[i] == "name")
                    col_name = c;
                else if (fields[i] == "min_snr_db")
                    col_snr = c;
                else if (fields[i] == "rate_bps")
                    col_rate = c;
                else if (fields[i] == "bits_per_symbol")
                    col_bits = c;
                else if (fields[i] == "code_rate")
                    col_code = c;
                else
                    return error_info{where + "unknown column '" + std::string(fields[i]) + "'"};
            }
            if (col_name < 0 || col_snr < 0 || col_rate < 0) {
                return error_info{where + "header needs name,min_snr_db,rate_bps"};
            }
            ncols = fields.size();
            have_header = true;
            continue;
        }
        if (fields.size() != ncols) {
            return error_info{where + std::to_string(fields.size()) + " fields, header has " +
                              std::to_string(ncols)};
        }
        mcs_entry e;
        e.name = std::string(fields[static_cast<std::size_t>(col_name)]);
        const auto field = [&](int c) { return fields[static_cast<std::size_t>(c)]; };
        if (!parse_double(field(col_snr), e.min_snr_db)) {
            return error_info{where + "min_snr_db '" + std::string(field(col_snr)) +
                              "' is not a number"};
        }
        if (!parse_double(field(col_rate), e.rate_bps)) {
            return error_info{where + "rate_bps '" + std::string(field(col_rate)) +
                              "' is not a number"};
        }
        if (col_bits >= 0 && !parse_uint(field(col_bits), e.bits_per_symbol)) {
            return error_info{where + "bits_per_symbol '" + std::string(field(col_bits)) +
                              "' is not an unsigned integer"};
        }
        if (col_code >= 0 && !parse_double(field(col_code), e.code_rate)) {
            return error_info{where + "code_rate '" + std::string(field(col_code)) +
                              "' is not a number"};
        }
        rows.push_back(std::move(e));
    }
    if (!have_header) return error_info{"linkadapt.csv: no header"};
    try {
        return mcs_table(std::move(name), std::move(rows));
    } catch (const std::invalid_argument& e) {
        return error_info{e.what()};
    }
}

std::string mcs_table::to_csv() const {
    std::ostringstream os;
    os.precision(std::numeric_limits<double>::max_digits10);
    os << "name,min_snr_db,rate_bps,bits_per_symbol,code_rate\n";
    for (const mcs_entry& e : entries_) {
        os << e.name << ',' << e.min_snr_db << ',' << e.rate_bps << ',' << e.bits_per_symbol << ','
           << e.code_rate << '\n';
    }
    return os.str();
}

int mcs_table::select(double snr_db) const {
    if (!(snr_db >= entries_.front().min_snr_db)) return kNoMcs;  // also NaN
    const auto it = std::upper_bound(entries_.begin(), entries_.end(), snr_db,
                                     [](double v, const mcs_entry& e) { return v < e.min_snr_db; });
    return static_cast<int>(it - entries_.begin()) - 1;
}

double mcs_table::rate_at(double snr_db) const {
    const int m = select(snr_db);
    return m == kNoMcs ? 0.0 : entries_[static_cast<std::size_t>(m)].rate_bps;
}

std::uint32_t mcs_table::bytes_per_slot(int mcs, double slot_s) const {
    if (mcs == kNoMcs) return 0;
    if (mcs < 0 || static_cast<std::size_t>(mcs) >= entries_.size()) {
        throw_invalid("linkadapt.mcs: " + std::to_string(mcs) + " not in [-1, " +
                      std::to_string(entries_.size()) + ")");
    }
    if (!(slot_s > 0.0 && std::isfinite(slot_s)))
        throw_invalid("linkadapt.slot_s: " + format_number(slot_s) + " not > 0");
    // The tiny epsilon absorbs rounding in rate * slot (38400 b/s x 1/600 s = 64 bits).
    const double bytes = entries_[static_cast<std::size_t>(mcs)].rate_bps * slot_s / 8.0;
    return static_cast<std::uint32_t>(std::floor(bytes + 1e-9));
}

int cqi_to_mcs(const mcs_table& table, double cqi_db, double offset_db) {
    return table.select(cqi_db + offset_db);
}

olla::olla(const olla_params& cfg) : cfg_(cfg) {
    const double b = cfg.target_bler;
    if (!(b > 0.0 && b < 0.5))
        throw_invalid("olla.target_bler: " + format_number(b) + " not in (0,0.5)");
    if (!(cfg.delta_down_db > 0.0 && std::isfinite(cfg.delta_down_db))) {
        throw_invalid("olla.delta_down_db: " + format_number(cfg.delta_down_db) +
                      " not > 0 and finite");
    }
    // Convergence condition (Pedersen et al. 2007): zero mean drift at BLER_t.
    const double ratio = b / (1.0 - b);
    down_ = cfg.delta_down_db;
    if (cfg.delta_up_db == 0.0) {
        up_ = ratio * down_;
    } else {
        up_ = cfg.delta_up_db;
        if (!(up_ > 0.0) || std::fabs(up_ / down_ - ratio) > 1e-6 * ratio) {
            throw_invalid(
                "olla.delta_up_db: " + format_number(up_) +
                " breaks delta_up/delta_down = BLER_t/(1-BLER_t) = " + format_number(ratio));
        }
    }
    if (!(cfg.min_offset_db < cfg.max_offset_db) || !std::isfinite(cfg.min_offset_db) ||
        !std::isfinite(cfg.max_offset_db)) {
        throw_invalid("olla.max_offset_db: " + format_number(cfg.max_offset_db) +
                      " not > min_offset_db " + format_number(cfg.min_offset_db));
    }
    if (cfg.max_offset_db - cfg.min_offset_db < down_) {
        throw_invalid("olla.max_offset_db: range " +
                      format_number(cfg.max_offset_db - cfg.min_offset_db) +
                      " dB narrower than delta_down_db " + format_number(down_));
    }
    if (!(cfg.initial_offset_db >= cfg.min_offset_db &&
          cfg.initial_offset_db <= cfg.max_offset_db)) {
        throw_invalid("olla.initial_offset_db: " + format_number(cfg.initial_offset_db) +
                      " not in [" + format_number(cfg.min_offset_db) + ", " +
                      format_number(cfg.max_offset_db) + "]");
    }
    offset_ = cfg.initial_offset_db;
}

void olla::update(bool ack, mcs_position pos) {
    double next = offset_;
    if (ack) {
        ++acks_;
        if (pos == mcs_position::highest || pos == mcs_position::only) return;
        next += up_;
    } else {
        ++nacks_;
        if (pos == mcs_position::lowest || pos == mcs_position::only) return;
        next -= down_;
    }
    if (next > cfg_.max_offset_db || next < cfg_.min_offset_db) {
        ++clamped_;
        next = std::clamp(next, cfg_.min_offset_db, cfg_.max_offset_db);
    }
    offset_ = next;
}

mcs_position olla::position_of(const mcs_table& t, int mcs) {
    if (t.size() == 1) return mcs_position::only;
    if (mcs <= 0) return mcs_position::lowest;
    if (static_cast<std::size_t>(mcs) + 1 >= t.size()) return mcs_position::highest;
    return mcs_position::interior;
}

}  // namespace oppsched::linkadapt
