// The configuration of the SPM-AF marker (spm_mark.bpf.c), shared by the BPF program and
// its loader (oppsched-spm-mark): one struct, the whole .rodata of the program.
#ifndef OPPSCHED_SPM_MARK_CONFIG_H
#define OPPSCHED_SPM_MARK_CONFIG_H

#include <linux/types.h>

// Wu, Gong & Williamson, §6.1: packets sent while the congestion window is below 4 segments.
#define SPM_MARK_DEFAULT_CWND_BELOW 4
// DSCP 3 (000011): pool 2 of RFC 2474 §6 (xxxx11), "experimental or local use". Not CS1
// (001000): RFC 4594 gives CS1 to low-priority data, the opposite of this mark.
#define SPM_MARK_DEFAULT_DSCP 3
// Bytes before the IP header at TC egress: 14 on Ethernet (veth), 0 on an L3 device (TUN).
#define SPM_MARK_DEFAULT_L2_LEN 14

struct spm_mark_config {
    __u32 cwnd_below;  // mark while snd_cwnd < cwnd_below (segments); 0 never marks
    __u32 dscp;        // 0..63, written into the IPv4 TOS / IPv6 traffic class
    __u32 l2_len;      // 14 (Ethernet) or 0 (no link-layer header)
};

#endif
