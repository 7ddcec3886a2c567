// The daemons' field tables (oppsched/daemon/field_table.h, field_spec.h): a field is read only
// from the mapping its table names, with the table's default and range, and the table prints as the
// JSON the experiment schema's committed copy is made from.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "oppsched/daemon/config.h"
#include "oppsched/daemon/field_table.h"

using oppsched::daemon::config_error;
using oppsched::daemon::config_node;
using oppsched::daemon::value_range;
namespace d = oppsched::daemon;

namespace {
const d::field_spec kLead =
    d::integer_field("", "lead_slots", 4, value_range::closed(1, 1000), "slots", "the lead");
const d::field_spec kProcesses =
    d::integer_field("harq", "processes", 8, value_range::closed(1, 16), "", "processes");
}  // namespace

TEST(field_table, a_field_takes_its_tables_default_and_refuses_a_value_outside_its_range) {
    EXPECT_EQ(d::read_field<unsigned>(config_node::parse("{}"), kLead), 4u);
    EXPECT_EQ(d::read_field<unsigned>(config_node::parse("lead_slots: 1000"), kLead), 1000u);
    try {
        d::read_field<unsigned>(config_node::parse("lead_slots: 1001"), kLead);
        FAIL() << "1001 accepted";
    } catch (const config_error& e) {
        EXPECT_EQ(std::string(e.what()), "lead_slots: 1001 not in [1,1000]");
    }
}

TEST(field_table, when_a_reader_reads_a_field_from_another_mapping_then_it_is_a_logic_error) {
    const config_node root = config_node::parse("harq: {processes: 4}");
    EXPECT_THROW(d::read_field<unsigned>(root, kProcesses), std::logic_error);
    EXPECT_EQ(d::read_field<unsigned>(root.child("harq"), kProcesses), 4u);
}

TEST(field_table, the_json_gives_each_end_open_or_closed_and_numbers_that_read_back) {
    const auto alpha = d::number_field("scheduler", "alpha", 0.03, value_range::open_closed(0, 1),
                                       "per slot", "EMA \"weight\"");
    const std::string j = d::fields_json("apd", {kLead, alpha});
    EXPECT_NE(j.find("\"key\": \"lead_slots\", \"type\": \"integer\", \"default\": 4, \"min\": 1, "
                     "\"max\": 1000, \"min_open\": false, \"max_open\": false, \"zero_off\": "
                     "false, \"violation\": \"not in [1,1000]\""),
              std::string::npos)
        << j;
    EXPECT_NE(j.find("\"key\": \"scheduler.alpha\", \"type\": \"number\", \"default\": 0.03, "
                     "\"min\": 0.0, \"max\": 1.0, \"min_open\": true, \"max_open\": false"),
              std::string::npos)
        << j;
    EXPECT_NE(j.find("\"help\": \"EMA \\\"weight\\\"\""), std::string::npos) << j;
}

TEST(field_table, a_zero_off_entry_takes_0_beside_its_range_and_no_yaml_reader_takes_it) {
    d::field_spec rate =
        d::number_field("", "rate_bps", 0.0, value_range::closed(1e3, 1e12), "bit/s", "rate");
    rate.zero_off = true;
    EXPECT_TRUE(rate.accepts(0.0));
    EXPECT_TRUE(rate.accepts(1e3));
    EXPECT_FALSE(rate.accepts(999.0));
    EXPECT_EQ(rate.violation(), "not 0 or in [1000,1e+12]");
    const std::string j = d::fields_json("delay", {rate});
    EXPECT_NE(j.find("\"zero_off\": true, \"violation\": \"not 0 or in [1000,1e+12]\""),
              std::string::npos)
        << j;
    EXPECT_THROW(d::read_field<double>(config_node::parse("rate_bps: 0"), rate), std::logic_error);
}
