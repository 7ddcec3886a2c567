// ZeroMQ endpoints, CSV writer, stats JSON, rate-limited log, signals, TUN refusal and the
// capability drop of the daemons' common library.
#include <gtest/gtest.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "fsize_limit.h"
#include "oppsched/daemon/csv_writer.h"
#include "oppsched/daemon/disk_syncer.h"
#include "oppsched/daemon/log.h"
#include "oppsched/daemon/privileges.h"
#include "oppsched/daemon/signals.h"
#include "oppsched/daemon/stats.h"
#include "oppsched/daemon/tun.h"
#include "oppsched/daemon/zmq_endpoint.h"

namespace oppsched::daemon {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "/oppsched_daemon_test_" + std::to_string(::getpid()) + "_" +
           name;
}

// ---- ZeroMQ ------------------------------------------------------------------------------

TEST(ZmqEndpoint, when_no_peer_is_connected_then_send_returns_false_at_once_and_counts) {
    zmq::context_t ctx(1);
    socket_options o;
    o.send_timeout_ms = 30;
    push_endpoint push(ctx, "grants", "inproc://nobody-" + std::to_string(::getpid()),
                       socket_role::bind, o);
    const std::vector<std::uint8_t> msg(100, 1);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) EXPECT_FALSE(push.send(msg));
    EXPECT_FALSE(push.send(msg, /*wait=*/true));  // bounded by SNDTIMEO
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(push.stats().dropped_no_peer, 11u);
    EXPECT_EQ(push.stats().sent, 0u);
    // Generous bound: not a speed test, only "never blocks indefinitely".
    EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(ZmqEndpoint, when_a_peer_is_connected_then_messages_arrive_in_order) {
    zmq::context_t ctx(1);
    const std::string ep = "inproc://pair-" + std::to_string(::getpid());
    pull_endpoint pull(ctx, "requests", ep, socket_role::bind);
    push_endpoint push(ctx, "phy", ep, socket_role::connect);
    std::vector<std::uint8_t> got;
    EXPECT_FALSE(pull.receive(got));  // nothing yet, does not block
    ASSERT_TRUE(push.send(std::vector<std::uint8_t>{1, 2, 3}, /*wait=*/true));
    ASSERT_TRUE(push.send(std::vector<std::uint8_t>{4}, /*wait=*/true));
    ASSERT_TRUE(pull.receive(got, /*wait=*/true));
    EXPECT_EQ(got, (std::vector<std::uint8_t>{1, 2, 3}));
    ASSERT_TRUE(pull.receive(got, /*wait=*/true));
    EXPECT_EQ(got, (std::vector<std::uint8_t>{4}));
    EXPECT_EQ(pull.stats().received, 2u);
    EXPECT_EQ(push.stats().sent, 2u);
}

TEST(ZmqEndpoint, when_a_message_is_oversized_then_both_ends_drop_and_count_it) {
    zmq::context_t ctx(1);
    const std::string ep = "inproc://big-" + std::to_string(::getpid());
    socket_options small;
    small.max_msg_size = 100;
    socket_options big;
    big.max_msg_size = 1000;
    pull_endpoint pull(ctx, "uplink", ep, socket_role::bind, small);
    push_endpoint push_small(ctx, "a", ep, socket_role::connect, small);
    push_endpoint push_big(ctx, "b", ep, socket_role::connect, big);
    EXPECT_FALSE(push_small.send(std::vector<std::uint8_t>(101, 0)));
    EXPECT_EQ(push_small.stats().dropped_oversized, 1u);
    ASSERT_TRUE(push_big.send(std::vector<std::uint8_t>(150, 0), true));  // reaches the PULL
    ASSERT_TRUE(push_big.send(std::vector<std::uint8_t>(10, 7), true));
    std::vector<std::uint8_t> got;
    ASSERT_TRUE(pull.receive(got, /*wait=*/true));
    EXPECT_EQ(got, std::vector<std::uint8_t>(10, 7));  // the big one was skipped
    EXPECT_EQ(pull.stats().dropped_oversized, 1u);
}

TEST(ZmqEndpoint, when_receive_waits_then_it_gives_up_after_the_timeout) {
    zmq::context_t ctx(1);
    socket_options o;
    o.recv_timeout_ms = 20;
    pull_endpoint pull(ctx, "x", "inproc://quiet-" + std::to_string(::getpid()), socket_role::bind,
                       o);
    std::vector<std::uint8_t> got;
    EXPECT_FALSE(pull.receive(got, /*wait=*/true));
    EXPECT_EQ(pull.stats().received, 0u);
}

TEST(ZmqEndpoint, when_binding_ipc_then_the_directory_is_created) {
    const std::string dir = temp_path("zmqdir");
    const std::string ep = "ipc://" + dir + "/nested/sock";
    {
        zmq::context_t ctx(1);
        pull_endpoint pull(ctx, "x", ep, socket_role::bind);
        struct stat st {};
        ASSERT_EQ(::stat((dir + "/nested").c_str(), &st), 0);
        EXPECT_TRUE(S_ISDIR(st.st_mode));
        EXPECT_EQ(::stat((dir + "/nested/sock").c_str(), &st), 0);
    }
    std::error_code ec;
    EXPECT_GT(std::filesystem::remove_all(dir, ec), 0u) << ec.message();
}

TEST(ZmqEndpoint, when_binding_ipc_then_a_created_directory_is_private) {
    const std::string dir = temp_path("zmqpriv");
    {
        zmq::context_t ctx(1);
        pull_endpoint pull(ctx, "x", "ipc://" + dir + "/sock", socket_role::bind);
        struct stat st {};
        ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, 0700u);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

TEST(ZmqEndpoint, when_the_ipc_directory_is_a_symlink_then_bind_and_connect_refuse_it) {
    const std::string real = temp_path("zmqreal");
    const std::string link = temp_path("zmqlink");
    ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
    ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
    zmq::context_t ctx(1);
    for (const auto role : {socket_role::bind, socket_role::connect}) {
        try {
            pull_endpoint pull(ctx, "uplink", "ipc://" + link + "/sock", role);
            FAIL() << "a symlinked ipc directory was accepted";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(
                std::string(e.what()).find("uplink: ipc directory " + link + " is a symbolic link"),
                std::string::npos)
                << e.what();
        }
    }
    ::unlink(link.c_str());
    ::rmdir(real.c_str());
}

TEST(ZmqEndpoint, when_the_ipc_directory_is_writable_by_others_then_it_is_refused) {
    const std::string dir = temp_path("zmqopen");
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
    zmq::context_t ctx(1);
    try {
        pull_endpoint pull(ctx, "rx", "ipc://" + dir + "/sock", socket_role::bind);
        FAIL() << "a world-writable ipc directory was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("writable by group or others (mode 777)"),
                  std::string::npos)
            << e.what();
    }
    ::rmdir(dir.c_str());
}

TEST(ZmqEndpoint, when_the_ipc_directory_belongs_to_another_user_then_it_is_refused) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
    const std::string dir = temp_path("zmqother");
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    zmq::context_t ctx(1);
    try {
        pull_endpoint pull(ctx, "rx", "ipc://" + dir + "/sock", socket_role::bind);
        FAIL() << "another user's ipc directory was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("belongs to uid 65534"), std::string::npos)
            << e.what();
    }
    ::rmdir(dir.c_str());
}

TEST(ZmqEndpoint, when_an_address_beyond_loopback_is_bound_then_it_is_refused) {
    for (const char* ok :
         {"ipc:///tmp/x/y", "inproc://a", "tcp://127.0.0.1:5555", "tcp://127.1.2.3:1",
          "tcp://[::1]:5555", "tcp://localhost:5555", "tcp://lo:5555"})
        EXPECT_EQ(bind_refusal(ok), "") << ok;
    for (const char* bad :
         {"tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://[::]:5555", "tcp://eth0:5555",
          "tcp://192.168.1.4:5555", "tcp://127.0.0.1.5:1", "tcp://127.example.org:1"})
        EXPECT_NE(bind_refusal(bad).find("binds a non-loopback address"), std::string::npos) << bad;
    zmq::context_t ctx(1);
    try {
        pull_endpoint pull(ctx, "uplink", "tcp://0.0.0.0:0", socket_role::bind);
        FAIL() << "bound 0.0.0.0 without authentication";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(
            std::string(e.what()).rfind("uplink: refusing to bind: 'tcp://0.0.0.0:0' binds a", 0),
            0u)
            << e.what();
    }
}

TEST(ZmqEndpoint, when_an_endpoint_cannot_be_bound_then_the_error_names_it) {
    zmq::context_t ctx(1);
    try {
        pull_endpoint pull(ctx, "uplink", "bogus://x", socket_role::bind);
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("uplink: cannot bind bogus://x", 0), 0u) << e.what();
    }
}

// ---- CSV ---------------------------------------------------------------------------------

TEST(csv_writer, when_rows_are_written_then_the_file_has_header_rows_and_quoting) {
    const std::string path = temp_path("t.csv");
    {
        csv_writer w(path, {"slot", "user", "cqi", "outcome"});
        w.field(std::uint64_t{7}).field(-1).field(1.25).field("ack").end_row();
        w.field(std::uint64_t{8}).field(2).field(std::nan("")).field("a,\"b\"").end_row();
        w.field(std::uint64_t{9}).empty().field(1e-12).field("").end_row();
        EXPECT_EQ(w.rows(), 3u);
    }
    EXPECT_EQ(slurp(path),
              "slot,user,cqi,outcome\n7,-1,1.25,ack\n8,2,,\"a,\"\"b\"\"\"\n9,,1e-12,\n");
    std::remove(path.c_str());
}

TEST(csv_writer, when_the_buffer_is_not_full_then_rows_reach_the_file_on_flush) {
    const std::string path = temp_path("buf.csv");
    csv_writer w(path, {"a"}, /*buffer_bytes=*/1 << 20);
    w.field(1).end_row();
    // written under the partial name; the header at once, the row buffered
    EXPECT_EQ(slurp(path + ".partial"), "a\n");
    ASSERT_TRUE(w.flush());
    EXPECT_EQ(slurp(path + ".partial"), "a\n1\n");
    std::remove((path + ".partial").c_str());
}

TEST(csv_writer, when_it_is_closed_then_the_partial_file_is_renamed_to_the_trace) {
    const std::string path = temp_path("closed.csv");
    std::remove(path.c_str());
    {
        csv_writer w(path, {"a"}, /*buffer_bytes=*/1 << 20);
        w.field(1).end_row();
        ASSERT_TRUE(w.sync());  // on the disk, still under the partial name
        EXPECT_EQ(slurp(path + ".partial"), "a\n1\n");
        EXPECT_FALSE(std::filesystem::exists(path));
        w.field(2).end_row();
        ASSERT_TRUE(w.close());
        EXPECT_FALSE(w.close());  // once
    }
    EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
    EXPECT_EQ(slurp(path), "a\n1\n2\n");
    std::remove(path.c_str());
}

TEST(csv_writer,
     when_the_process_dies_without_closing_then_the_partial_file_keeps_the_synced_rows) {
    const std::string path = temp_path("died.csv");
    std::remove(path.c_str());
    std::remove((path + ".partial").c_str());
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        csv_writer w(path, {"a", "b"}, /*buffer_bytes=*/1 << 20);
        w.field(1).field(2).end_row();
        w.sync();
        w.field(3).field(4).end_row();  // buffered, never written
        ::raise(SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_EQ(slurp(path + ".partial"), "a,b\n1,2\n");
    std::remove((path + ".partial").c_str());
}

TEST(csv_writer, when_the_buffer_fills_then_it_is_written_without_flush) {
    const std::string path = temp_path("small.csv");
    csv_writer w(path, {"a"}, /*buffer_bytes=*/8);
    for (int i = 0; i < 5; ++i) w.field(1000 + i).end_row();  // 5 bytes each
    EXPECT_GE(slurp(path + ".partial").size(), std::string("a\n1000\n1001\n").size());
    std::remove((path + ".partial").c_str());
}

TEST(csv_writer, when_a_row_has_the_wrong_number_of_fields_then_it_throws) {
    const std::string path = temp_path("bad.csv");
    csv_writer w(path, {"a", "b"});
    w.field(1);
    EXPECT_THROW(w.end_row(), std::logic_error);
    std::remove((path + ".partial").c_str());
}

TEST(csv_writer, when_the_path_cannot_be_opened_then_the_error_names_it) {
    try {
        csv_writer w("/nonexistent-dir/x.csv", {"a"});
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.csv"), std::string::npos);
    }
}

TEST(csv_writer,
     when_the_disk_is_full_then_the_buffered_rows_are_counted_lost_and_the_file_keeps_whole_rows) {
    const std::string path = temp_path("full.csv");
    std::remove(path.c_str());
    csv_writer w(path, {"a", "b"}, /*buffer_bytes=*/1 << 20);
    w.field(1).field(2).end_row();
    ASSERT_TRUE(w.flush());  // "a,b\n1,2\n": 8 bytes
    {
        testing::fsize_limit full(12);  // room for one more row, not for three
        w.field(3).field(4).end_row();
        w.field(5).field(6).end_row();
        w.field(7).field(8).end_row();
        EXPECT_FALSE(w.flush());
        EXPECT_TRUE(w.sync());  // nothing left to write: the loss is counted once
    }
    EXPECT_EQ(w.errors(), 1u);
    EXPECT_EQ(w.rows_lost(), 3u);
    // What was written before stays, and no torn row: the file is cut at its last whole row.
    EXPECT_EQ(slurp(path + ".partial"), "a,b\n1,2\n");
    // With room again, the trace continues well-formed and is renamed at the close.
    w.field(9).field(10).end_row();
    EXPECT_TRUE(w.close());
    EXPECT_EQ(slurp(path), "a,b\n1,2\n9,10\n");
    EXPECT_EQ(w.rows(), 5u);
    EXPECT_EQ(w.errors(), 1u);
    std::remove(path.c_str());
}

TEST(csv_writer,
     when_even_the_header_cannot_be_written_then_it_is_written_first_once_there_is_room) {
    const std::string path = temp_path("full0.csv");
    std::remove(path.c_str());
    std::optional<csv_writer> w;
    {
        testing::fsize_limit full(2);
        w.emplace(path, std::vector<std::string>{"a", "b"}, /*buffer_bytes=*/1 << 20);
        w->field(1).field(2).end_row();
        EXPECT_FALSE(w->flush());
    }
    EXPECT_EQ(w->rows_lost(), 1u);  // the row; the header is kept for the next write
    EXPECT_EQ(w->errors(), 2u);     // the header's write and the row's
    w->field(3).field(4).end_row();
    EXPECT_TRUE(w->close());
    EXPECT_EQ(slurp(path), "a,b\n3,4\n");
    std::remove(path.c_str());
}

TEST(disk_syncer, when_drained_then_synced_rows_and_the_newest_stats_text_are_in_the_files) {
    const std::string trace = temp_path("synced.csv");
    const std::string stats = temp_path("synced.json");
    {
        csv_writer w(trace, {"a"}, /*buffer_bytes=*/1 << 20);
        disk_syncer s;
        for (int i = 0; i < 50; ++i) {
            w.field(i).end_row();
            ASSERT_TRUE(w.flush());
            s.sync_fd(w.fd());
            s.write_file(stats, "{\"rows\":" + std::to_string(w.rows()) + "}\n");
        }
        s.drain();
        EXPECT_GE(s.jobs(), 1u);
        EXPECT_EQ(s.errors(), 0u);
        EXPECT_EQ(slurp(stats), "{\"rows\":50}\n");  // merged requests: the newest text won
        EXPECT_FALSE(std::filesystem::exists(stats + ".tmp"));
        const std::string text = slurp(trace + ".partial");
        EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 51);  // header + 50 rows
    }
    std::remove(trace.c_str());
    std::remove(stats.c_str());
}

TEST(disk_syncer, when_a_file_cannot_be_written_then_the_error_is_counted_not_thrown) {
    disk_syncer s;
    s.write_file("/nonexistent-dir/x.json", "{}");
    s.drain();
    EXPECT_EQ(s.errors(), 1u);
}

// ---- Stats -------------------------------------------------------------------------------

TEST(StatsJson, when_names_are_dotted_then_the_json_is_nested_and_sorted) {
    stats_registry s;
    ++s.counter("malformed.uplink");
    s.counter("malformed.phy_requests") += 3;
    s.set("core.users.ue0.snr_db", 4.5);
    s.set("core.users.ue0.name", std::string("ue\"0"));
    s.set("nan", std::nan(""));
    s.set("ok", true);
    s.set("neg", std::int64_t{-2});
    EXPECT_EQ(s.to_json(),
              "{\"core\":{\"users\":{\"ue0\":{\"name\":\"ue\\\"0\",\"snr_db\":4.5}}},"
              "\"malformed\":{\"phy_requests\":3,\"uplink\":1},\"nan\":null,\"neg\":-2,"
              "\"ok\":true}\n");
}

TEST(StatsJson, when_a_name_is_both_leaf_and_prefix_then_it_is_refused) {
    stats_registry s;
    s.counter("a.b");
    EXPECT_THROW(s.counter("a"), std::invalid_argument);
    EXPECT_THROW(s.counter("a.b.c"), std::invalid_argument);
    EXPECT_THROW(s.counter("x..y"), std::invalid_argument);
    EXPECT_NO_THROW(s.counter("a.c"));
}

TEST(StatsJson, when_written_then_the_file_holds_the_document_and_no_temporary_is_left) {
    const std::string path = temp_path("stats.json");
    stats_registry s;
    std::uint64_t& c = s.counter("x.y");
    c = 5;
    ASSERT_TRUE(s.write_json(path));
    EXPECT_EQ(slurp(path), "{\"x\":{\"y\":5}}\n");
    c = 6;  // the reference stays valid
    ASSERT_TRUE(s.write_json(path));
    EXPECT_EQ(slurp(path), "{\"x\":{\"y\":6}}\n");
    EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
    EXPECT_FALSE(s.write_json("/nonexistent-dir/stats.json"));
    std::remove(path.c_str());
}

// ---- Rate-limited log --------------------------------------------------------------------

TEST(rate_limited_log, when_a_kind_repeats_within_the_interval_then_it_is_suppressed) {
    rate_limited_log log(kNsPerSec);
    EXPECT_TRUE(log.allow("malformed.uplink", 0));
    EXPECT_FALSE(log.allow("malformed.uplink", kNsPerSec / 2));
    EXPECT_FALSE(log.allow("malformed.uplink", kNsPerSec - 1));
    EXPECT_TRUE(log.allow("malformed.phy", kNsPerSec / 2));  // kinds are independent
    EXPECT_EQ(log.suppressed("malformed.uplink"), 2u);
    EXPECT_TRUE(log.allow("malformed.uplink", kNsPerSec));
}

// ---- Signals -----------------------------------------------------------------------------

TEST(signal_set, when_signals_arrive_then_drain_reports_stop_and_stats) {
    signal_set sigs;
    EXPECT_FALSE(sigs.drain().stop);
    ::raise(SIGUSR1);
    auto p = sigs.drain();
    EXPECT_TRUE(p.dump_stats);
    EXPECT_FALSE(p.stop);
    ::raise(SIGTERM);
    p = sigs.drain();
    EXPECT_TRUE(p.stop);
    EXPECT_EQ(p.stop_signal, SIGTERM);
    EXPECT_FALSE(p.dump_stats);
    ::raise(SIGINT);
    EXPECT_EQ(sigs.drain().stop_signal, SIGINT);
}

// ---- TUN ---------------------------------------------------------------------------------

TEST(tun_device, when_the_device_does_not_exist_then_open_fails_and_creates_nothing) {
    const std::string name = "oppnx" + std::to_string(::getpid() % 100000);
    try {
        tun_device::open(name);
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("tun.name: '" + name + "'", 0), 0u) << e.what();
    }
    EXPECT_EQ(::if_nametoindex(name.c_str()), 0u);
    EXPECT_THROW(tun_device::open(""), std::runtime_error);
    EXPECT_THROW(tun_device::open("lo"), std::runtime_error);  // exists, not a TUN
}

// ---- Capabilities ------------------------------------------------------------------------

TEST(Privileges, when_dropped_then_no_capability_is_left_and_no_new_privs_is_set) {
    // In a child: the drop is irreversible and per process.
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int code = 0;
        try {
            drop_all_capabilities();
            if (has_any_capability()) code = 2;
            if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) code = 3;
            if (::prctl(PR_CAPBSET_READ, 12 /* CAP_NET_ADMIN */, 0, 0, 0) == 1) code = 4;
        } catch (...) {
            code = 1;
        }
        ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace oppsched::daemon
