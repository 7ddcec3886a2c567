/* oppsched's C plugin interface (docs/extending.md, "C++ plugins"): a downlink scheduler
 * policy or an AP queue's AQM compiled into a shared library that oppsched-apd, macsim and
 * `oppsched check` load with dlopen, without rebuilding the testbed.
 *
 *   scheduler: {kind: plugin, library: build/libmysched.so, params: {beta: 2.0}}
 *   aqm: {kind: plugin, library: build/libmyaqm.so, params: {target_s: 0.005}}
 *
 * The library exports one C function,
 *
 *   const oppsched_plugin_v1* oppsched_plugin_entry(void);
 *
 * returning a description that lives as long as the library (a static): the ABI version it
 * was compiled against, its family, its name and the family's function table. Only C types
 * cross the boundary (no C++ classes, no exceptions, no allocation freed by the other side),
 * so a plugin built with another compiler or standard library than the testbed's still loads.
 *
 * ABI version rule: OPPSCHED_PLUGIN_ABI_VERSION changes whenever a struct below changes its
 * layout or a function its meaning; the loader accepts exactly its own version and refuses
 * any other ("scheduler.library: <path>: ABI version 2, this oppsched takes 1: rebuild the
 * plugin against host/include/oppsched/plugin_api.h"). A rebuild against the new header is
 * all a plugin needs for a new version that only adds fields.
 *
 * The scheduler protocol is the Python plugins' (docs/extending.md, "The protocol"):
 *   - select(slot, users, n) is called in every slot that is free for new data and has at
 *     least one candidate; `users` are this slot's candidates only, in id order. Return an
 *     index into `users`, OPPSCHED_NO_USER to leave the slot empty, or OPPSCHED_PLUGIN_ERROR
 *     when the plugin failed (counted as scheduler.plugin_exceptions). Any other answer is
 *     counted (scheduler.plugin_invalid_decisions), and the built-in PF decides the slot, as
 *     it does when select() returns later than the decision budget
 *     (scheduler.plugin_deadline_misses).
 *   - served(slot, user, bytes), optional (NULL), is called once at the end of every slot,
 *     HARQ retransmission slots included: the user's id or OPPSCHED_NO_USER, and the bytes its
 *     rate carries in one slot.
 * Every call comes from one thread (the apd's slot loop), and the apd runs it under its
 * seccomp allow-list: a plugin computes, allocates and reads the clock; it starts no process
 * and opens no file after create().
 *
 * The AQM protocol is below, before oppsched_plugin_v1.
 *
 * C++ plugins can use OPPSCHED_SCHEDULER_PLUGIN or OPPSCHED_AQM_PLUGIN at the end of this
 * header, which build the table from a class and turn an exception into
 * OPPSCHED_PLUGIN_ERROR.
 */
#ifndef OPPSCHED_PLUGIN_API_H
#define OPPSCHED_PLUGIN_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPPSCHED_PLUGIN_ABI_VERSION 1u
#define OPPSCHED_PLUGIN_ENTRY_SYMBOL "oppsched_plugin_entry"

/* select()'s answers besides an index into `users` */
#define OPPSCHED_NO_USER (-1)
#define OPPSCHED_PLUGIN_ERROR (-2)

enum oppsched_plugin_family { OPPSCHED_FAMILY_SCHEDULER = 1, OPPSCHED_FAMILY_AQM = 2 };

/* One candidate of a slot (the Python plugins' UserView). */
typedef struct oppsched_user_view {
    uint32_t id;          /* the user's index: users[id] of apd.yaml, the experiment's devices */
    double backlog_bytes; /* bytes queued for it, a partly sent packet's too (inf in macsim) */
    double rate_bps;      /* what its channel supports in this slot (its CQI, the MCS table) */
    double hol_delay_s;   /* age of its oldest queued packet (0 in macsim) */
    double avg_bps;       /* T_i, the framework's EMA of its served rate (sched.h, alpha =
                             scheduler.alpha); R_i / N before its first positive rate */
} oppsched_user_view;

/* One entry of the experiment's `params` mapping. `text` is the value as written (a YAML
 * scalar); `number` is its value when it reads as a number, NaN otherwise (booleans: NaN,
 * text "true"/"false"). Both pointers are valid during create() only. */
typedef struct oppsched_param {
    const char* key;
    const char* text;
    double number;
} oppsched_param;

typedef struct oppsched_scheduler_v1 {
    /* One policy for num_users users (the apd's users; more may come with set_num_users).
     * On failure returns NULL and writes a reason (NUL-terminated, at most error_len bytes)
     * into `error`, e.g. "beta: -1 must be > 0"; the loader refuses the plugin with it. */
    void* (*create)(const oppsched_param* params, size_t n_params, size_t num_users, char* error,
                    size_t error_len);
    void (*destroy)(void* self);
    /* See above. `users` is valid during the call only. */
    int64_t (*select)(void* self, int64_t slot, const oppsched_user_view* users, size_t n_users);
    /* Optional (NULL). user: an id, or OPPSCHED_NO_USER. */
    void (*served)(void* self, int64_t slot, int64_t user, uint64_t bytes);
    /* Optional (NULL): the number of users changed (ids 0 .. n-1). */
    void (*set_num_users)(void* self, size_t n);
} oppsched_scheduler_v1;

/* ---- AQM ----------------------------------------------------------------------------
 * The Python AQM plugins' protocol (docs/extending.md, "AQM plugins"): each user's queue gets
 * its own instance on a drop-tail FIFO with the queue's limits. enqueue() decides each arriving
 * packet (ACCEPT, DROP or MARK), dequeue() each leaving one (SEND, DROP or MARK; after DROP,
 * or MARK on a packet that cannot be marked, the next packet is offered), on_empty() (optional)
 * is told when a dequeue finds the queue empty. MARK sets CE on an ECN-capable packet when
 * aqm.ecn is on and drops any other packet. OPPSCHED_PLUGIN_ERROR (counted in
 * aqm.<queue>.plugin_exceptions) and any other answer (plugin_invalid_answers) accept or send
 * the packet, as drop-tail would. */
#define OPPSCHED_AQM_ACCEPT 1
#define OPPSCHED_AQM_SEND 2
#define OPPSCHED_AQM_DROP 3
#define OPPSCHED_AQM_MARK 4

typedef struct oppsched_packet_view {
    uint32_t size_bytes;
    uint32_t ecn_capable; /* 1: ECT(0), ECT(1) or CE; 0: Not-ECT */
    uint64_t flow;        /* SipHash of the 5-tuple under a fixed key: the same in every run */
    double arrival_s;     /* when it joined the queue */
} oppsched_packet_view;

typedef struct oppsched_queue_view {
    uint64_t bytes; /* enqueue: before the packet joins; dequeue: after it left */
    uint64_t packets;
    uint64_t limit_bytes; /* 0: no limit of that kind */
    uint64_t limit_packets;
    uint32_t ecn; /* aqm.ecn: 1 when MARK can mark */
} oppsched_queue_view;

typedef struct oppsched_aqm_v1 {
    /* One queue's instance; NULL and a reason in `error` to refuse the params. */
    void* (*create)(const oppsched_param* params, size_t n_params, char* error, size_t error_len);
    void (*destroy)(void* self);
    int32_t (*enqueue)(void* self, const oppsched_packet_view* pkt,
                       const oppsched_queue_view* queue, double now_s);
    int32_t (*dequeue)(void* self, const oppsched_packet_view* pkt,
                       const oppsched_queue_view* queue, double now_s);
    /* Optional (NULL). */
    void (*on_empty)(void* self, const oppsched_queue_view* queue, double now_s);
} oppsched_aqm_v1;

typedef struct oppsched_plugin_v1 {
    uint32_t abi_version; /* OPPSCHED_PLUGIN_ABI_VERSION: always the first member */
    uint32_t family;      /* enum oppsched_plugin_family */
    const char* name;     /* a plain name for logs and stats ("rr", "maxweight") */
    const oppsched_scheduler_v1* scheduler; /* OPPSCHED_FAMILY_SCHEDULER: the table, else NULL */
    const oppsched_aqm_v1* aqm;             /* OPPSCHED_FAMILY_AQM: the table, else NULL */
} oppsched_plugin_v1;

typedef const oppsched_plugin_v1* (*oppsched_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */

/* ---- C++ convenience -----------------------------------------------------------------
 * OPPSCHED_SCHEDULER_PLUGIN(Class, "name") defines oppsched_plugin_entry for a class with
 *
 *   Class(const oppsched::plugin_params& params, std::size_t num_users);  // may throw
 *   std::int64_t select(std::int64_t slot, const oppsched_user_view* users, std::size_t n);
 *   void served(std::int64_t slot, std::int64_t user, std::uint64_t bytes);
 *   void set_num_users(std::size_t n);
 *
 * An exception from the constructor refuses the plugin with its what(); from select() it is
 * OPPSCHED_PLUGIN_ERROR (PF decides, counted); from served() or set_num_users() it is
 * swallowed. Only the header's inline code runs at the boundary: nothing here links against
 * oppsched. */
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace oppsched {

/* The params as the plugin's constructor sees them. */
class plugin_params {
  public:
    plugin_params(const oppsched_param* p, size_t n) : p_(p), n_(n) {}
    bool has(const char* key) const { return find(key) != nullptr; }
    /* The value of `key` as a number; `fallback` when absent; std::invalid_argument when
     * present but not a number. */
    double number(const char* key, double fallback) const {
        const oppsched_param* e = find(key);
        if (!e) return fallback;
        if (std::isnan(e->number))
            throw std::invalid_argument(std::string(key) + ": '" + e->text + "' is not a number");
        return e->number;
    }
    std::string text(const char* key, const std::string& fallback) const {
        const oppsched_param* e = find(key);
        return e ? std::string(e->text) : fallback;
    }
    size_t size() const { return n_; }
    const oppsched_param& operator[](size_t i) const { return p_[i]; }

  private:
    const oppsched_param* find(const char* key) const {
        for (size_t i = 0; i < n_; ++i)
            if (std::string(p_[i].key) == key) return &p_[i];
        return nullptr;
    }
    const oppsched_param* p_;
    size_t n_;
};

namespace plugin_detail {
template <class T>
struct scheduler_adapter {
    static void* create(const oppsched_param* params, size_t n_params, size_t num_users,
                        char* error, size_t error_len) {
        try {
            return new T(plugin_params(params, n_params), num_users);
        } catch (const std::exception& e) {
            std::snprintf(error, error_len, "%s", e.what());
        } catch (...) {
            std::snprintf(error, error_len, "the constructor threw a non-std exception");
        }
        return nullptr;
    }
    static void destroy(void* self) { delete static_cast<T*>(self); }
    static int64_t select(void* self, int64_t slot, const oppsched_user_view* users, size_t n) {
        try {
            return static_cast<T*>(self)->select(slot, users, n);
        } catch (...) {
            return OPPSCHED_PLUGIN_ERROR;
        }
    }
    static void served(void* self, int64_t slot, int64_t user, uint64_t bytes) {
        try {
            static_cast<T*>(self)->served(slot, user, bytes);
        } catch (...) {
        }
    }
    static void set_num_users(void* self, size_t n) {
        try {
            static_cast<T*>(self)->set_num_users(n);
        } catch (...) {
        }
    }
};
template <class T>
struct aqm_adapter {
    static void* create(const oppsched_param* params, size_t n_params, char* error,
                        size_t error_len) {
        try {
            return new T(plugin_params(params, n_params));
        } catch (const std::exception& e) {
            std::snprintf(error, error_len, "%s", e.what());
        } catch (...) {
            std::snprintf(error, error_len, "the constructor threw a non-std exception");
        }
        return nullptr;
    }
    static void destroy(void* self) { delete static_cast<T*>(self); }
    static int32_t enqueue(void* self, const oppsched_packet_view* p, const oppsched_queue_view* q,
                           double now_s) {
        try {
            return static_cast<T*>(self)->enqueue(*p, *q, now_s);
        } catch (...) {
            return OPPSCHED_PLUGIN_ERROR;
        }
    }
    static int32_t dequeue(void* self, const oppsched_packet_view* p, const oppsched_queue_view* q,
                           double now_s) {
        try {
            return static_cast<T*>(self)->dequeue(*p, *q, now_s);
        } catch (...) {
            return OPPSCHED_PLUGIN_ERROR;
        }
    }
    static void on_empty(void* self, const oppsched_queue_view* q, double now_s) {
        try {
            static_cast<T*>(self)->on_empty(*q, now_s);
        } catch (...) {
        }
    }
};
}  // namespace plugin_detail
}  // namespace oppsched

#define OPPSCHED_SCHEDULER_PLUGIN(Class, Name)                                                   \
    extern "C" __attribute__((visibility("default"))) const oppsched_plugin_v1*                  \
    oppsched_plugin_entry(void) {                                                                \
        using oppsched_adapter_ = ::oppsched::plugin_detail::scheduler_adapter<Class>;           \
        static const oppsched_scheduler_v1 table = {                                             \
            &oppsched_adapter_::create, &oppsched_adapter_::destroy, &oppsched_adapter_::select, \
            &oppsched_adapter_::served, &oppsched_adapter_::set_num_users};                      \
        static const oppsched_plugin_v1 plugin = {                                               \
            OPPSCHED_PLUGIN_ABI_VERSION, OPPSCHED_FAMILY_SCHEDULER, Name, &table, nullptr};      \
        return &plugin;                                                                          \
    }

/* OPPSCHED_AQM_PLUGIN(Class, "name"): the entry point of an AQM plugin, a class with
 *   explicit Class(const oppsched::plugin_params& params);             // may throw
 *   int32_t enqueue(const oppsched_packet_view&, const oppsched_queue_view&, double now_s);
 *   int32_t dequeue(const oppsched_packet_view&, const oppsched_queue_view&, double now_s);
 *   void on_empty(const oppsched_queue_view&, double now_s);
 * An exception from enqueue() or dequeue() is OPPSCHED_PLUGIN_ERROR. */
#define OPPSCHED_AQM_PLUGIN(Class, Name)                                                          \
    extern "C" __attribute__((visibility("default"))) const oppsched_plugin_v1*                   \
    oppsched_plugin_entry(void) {                                                                 \
        using oppsched_adapter_ = ::oppsched::plugin_detail::aqm_adapter<Class>;                  \
        static const oppsched_aqm_v1 table = {                                                    \
            &oppsched_adapter_::create, &oppsched_adapter_::destroy, &oppsched_adapter_::enqueue, \
            &oppsched_adapter_::dequeue, &oppsched_adapter_::on_empty};                           \
        static const oppsched_plugin_v1 plugin = {OPPSCHED_PLUGIN_ABI_VERSION,                    \
                                                  OPPSCHED_FAMILY_AQM, Name, nullptr, &table};    \
        return &plugin;                                                                           \
    }

#endif /* __cplusplus */

#endif /* OPPSCHED_PLUGIN_API_H */
