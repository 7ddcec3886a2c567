// SPDX-License-Identifier: GPL-2.0
// SPM-AF's sender-side marking (Wu, Gong & Williamson, §6.1): "the TCP source ... sets the
// priority level for each output data packet based on the congestion window size": a packet
// sent while the congestion window is below 4 segments is "high" priority, every other
// packet "low". This program does that for the real Linux TCP of a sender namespace,
// outside the kernel's TCP code: attached at the TC egress (clsact, direct action) of the
// sender's interface, it reads snd_cwnd of the socket that sent the packet
// (bpf_sk_fullsock + bpf_tcp_sock on skb->sk) and writes the configured DSCP into the IP
// header of TCP data packets (payload > 0) sent while snd_cwnd < cwnd_below. The AP reads
// the code point back (ap_core: aqm.priority_dscp) into ip_packet::high_priority.
//
// Left alone: packets of sockets with snd_cwnd >= cwnd_below, pure ACKs and other TCP
// packets without payload (SYN, FIN, RST), packets with no full TCP socket (SYN-ACKs of
// request sockets, kernel RSTs, forwarded traffic), non-TCP packets, IPv6 packets with
// extension headers before TCP, IPv4 fragments. The two ECN bits are kept. A GSO packet
// (several segments in one skb) is marked as a whole: it left under one cwnd, and its IP
// header is copied to every segment.
//
// IPv4: TOS = DSCP << 2 | ECN, header checksum fixed incrementally (bpf_l3_csum_replace).
// IPv6: traffic class = DSCP << 2 | ECN across the first two bytes; no header checksum, and
// neither field is in the TCP pseudo-header, so the TCP checksum stays valid.
//
// Configuration: spm_mark_config in .rodata, set by the loader (oppsched-spm-mark) before
// the program is loaded; loaded by tc (`tc filter add dev DEV egress bpf direct-action obj
// spm_mark.bpf.o sec tc`) it runs with the defaults below.

// The kernel's UAPI headers before libbpf's, which need their types.
// clang-format off
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
// clang-format on

#include "spm_mark_config.h"

const volatile struct spm_mark_config spm_mark_config = {
    .cwnd_below = SPM_MARK_DEFAULT_CWND_BELOW,
    .dscp = SPM_MARK_DEFAULT_DSCP,
    .l2_len = SPM_MARK_DEFAULT_L2_LEN,
};

// Makes bytes [0, len) of the packet readable directly; 0 if the packet is shorter.
static __always_inline int pull(struct __sk_buff* skb, __u32 len) {
    if ((void*)(long)skb->data + len <= (void*)(long)skb->data_end) return 1;
    if (len > skb->len) return 0;
    if (bpf_skb_pull_data(skb, len) != 0) return 0;
    return (void*)(long)skb->data + len <= (void*)(long)skb->data_end;
}

SEC("tc")
int spm_mark(struct __sk_buff* skb) {
    // The sending socket first: most packets are decided without parsing.
    struct bpf_sock* sk = skb->sk;
    if (!sk) return TC_ACT_OK;
    sk = bpf_sk_fullsock(sk);
    if (!sk || sk->protocol != IPPROTO_TCP) return TC_ACT_OK;
    struct bpf_tcp_sock* tp = bpf_tcp_sock(sk);
    if (!tp || tp->snd_cwnd >= spm_mark_config.cwnd_below) return TC_ACT_OK;

    const __u32 l2 = spm_mark_config.l2_len & 0xff;
    const __u8 dscp = spm_mark_config.dscp & 0x3f;
    if (skb->protocol == bpf_htons(ETH_P_IP)) {
        if (!pull(skb, l2 + sizeof(struct iphdr) + sizeof(struct tcphdr))) return TC_ACT_OK;
        void* data = (void*)(long)skb->data;
        void* end = (void*)(long)skb->data_end;
        struct iphdr* ip = data + l2;
        if ((void*)(ip + 1) > end) return TC_ACT_OK;
        if (ip->protocol != IPPROTO_TCP || ip->ihl < 5) return TC_ACT_OK;
        if (ip->frag_off & bpf_htons(0x3fff)) return TC_ACT_OK;  // MF or an offset
        const __u32 ihl = ip->ihl * 4u;
        if (!pull(skb, l2 + ihl + sizeof(struct tcphdr))) return TC_ACT_OK;
        data = (void*)(long)skb->data;
        end = (void*)(long)skb->data_end;
        ip = data + l2;
        if ((void*)(ip + 1) > end) return TC_ACT_OK;
        struct tcphdr* th = (void*)ip + ihl;
        if ((void*)(th + 1) > end) return TC_ACT_OK;
        const __u32 headers = l2 + ihl + th->doff * 4u;
        if (skb->len <= headers) return TC_ACT_OK;  // no payload
        const __u8 old_tos = ip->tos;
        const __u8 new_tos = (__u8)(dscp << 2) | (old_tos & 0x3);
        if (new_tos == old_tos) return TC_ACT_OK;
        bpf_l3_csum_replace(skb, l2 + offsetof(struct iphdr, check), bpf_htons(old_tos),
                            bpf_htons(new_tos), 2);
        bpf_skb_store_bytes(skb, l2 + offsetof(struct iphdr, tos), &new_tos, 1, 0);
    } else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
        if (!pull(skb, l2 + sizeof(struct ipv6hdr) + sizeof(struct tcphdr))) return TC_ACT_OK;
        void* data = (void*)(long)skb->data;
        void* end = (void*)(long)skb->data_end;
        struct ipv6hdr* ip6 = data + l2;
        if ((void*)(ip6 + 1) > end) return TC_ACT_OK;
        if (ip6->nexthdr != IPPROTO_TCP) return TC_ACT_OK;
        struct tcphdr* th = (void*)(ip6 + 1);
        if ((void*)(th + 1) > end) return TC_ACT_OK;
        const __u32 headers = l2 + sizeof(struct ipv6hdr) + th->doff * 4u;
        if (skb->len <= headers) return TC_ACT_OK;  // no payload
        // Version (4 bits), traffic class (8), flow label (20): the class straddles bytes 0-1.
        __u8* b = (__u8*)ip6;
        const __u8 old_tc = (__u8)((b[0] & 0x0f) << 4 | b[1] >> 4);
        const __u8 new_tc = (__u8)(dscp << 2) | (old_tc & 0x3);
        if (new_tc == old_tc) return TC_ACT_OK;
        __u8 nb[2] = {(__u8)((b[0] & 0xf0) | new_tc >> 4),
                      (__u8)((new_tc & 0x0f) << 4 | (b[1] & 0x0f))};
        bpf_skb_store_bytes(skb, l2, nb, 2, 0);
    }
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
