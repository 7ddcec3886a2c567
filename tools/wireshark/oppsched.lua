-- Wireshark dissector for oppsched MAC captures (capture.mac: mac-ap.pcap,
-- mac-client.NAME.pcap; docs/testbed.md, "MAC captures").
--
-- Link type LINKTYPE_USER0 (147, Wireshark's "USER 0"). Each record is a 24-byte
-- pseudo-header (host/daemon/common/oppsched/daemon/mac_capture.h) and either a MAC PDU (a
-- transport block, host/include/oppsched/pdu.h: the standard and the compact format) or a
-- whole PHY-MAC wire frame (host/common/include/oppsched/wire.h). Complete IP packets inside
-- a PDU or an uplink_packet are handed to Wireshark's ip/ipv6 dissectors. A packet split
-- across TBs is reassembled from the PDU records of its user and direction (both formats)
-- and handed on in the record that completes it ("Reassembly" below).
--
-- Install: copy this file to ~/.local/lib/wireshark/plugins/ (Wireshark and tshark load it
-- at start), or name it on the command line:
--   tshark -X lua_script:tools/wireshark/oppsched.lua -r mac-ap.pcap \
--          -Y 'oppsched.kind == 1 && oppsched.user == 1' -T fields -e oppsched.slot -e tcp.seq
--
-- Malformed records are shown with expert infos (Analyze > Expert Information; the filter
-- `_ws.expert.severity == error`), never as Lua errors. Unknown flag bits and unknown
-- message types are shown and tolerated.

local proto = Proto("oppsched", "oppsched MAC capture")

local KIND = { [1] = "MAC PDU", [2] = "PHY-MAC message" }
local DIRECTION = { [0] = "sent", [1] = "received" }
local PORT = { [0] = "air", [1] = "phy_requests", [2] = "phy_grants", [3] = "uplink", [4] = "rx",
               [5] = "grants" }
local MSG_TYPE = {
    [1] = "slot_request", [2] = "slot_grant", [3] = "rx_indication",
    [4] = "cqi_report", [5] = "harq_feedback", [6] = "uplink_packet",
    [7] = "uplink_grant", [8] = "uplink_tb", [9] = "buffer_status",
}
local PDU_FORMAT = { [1] = "standard", [2] = "compact" }
local WIRE_MAGIC = 0x4F505053
local HEADER_LEN = 24
local COMPACT_NO_START = 0xFFFF

local f = {
    -- pseudo-header
    version = ProtoField.uint8("oppsched.version", "Capture version"),
    header_len = ProtoField.uint8("oppsched.header_len", "Pseudo-header length"),
    kind = ProtoField.uint8("oppsched.kind", "Record kind", base.DEC, KIND),
    direction = ProtoField.uint8("oppsched.direction", "Direction", base.DEC, DIRECTION),
    port = ProtoField.uint8("oppsched.port", "Port", base.DEC, PORT),
    flags = ProtoField.uint8("oppsched.flags", "Flags", base.HEX),
    flag_slot = ProtoField.bool("oppsched.flags.slot", "Slot valid", 8, nil, 0x01),
    flag_user = ProtoField.bool("oppsched.flags.user", "User valid", 8, nil, 0x02),
    flag_harq = ProtoField.bool("oppsched.flags.harq", "HARQ fields valid", 8, nil, 0x04),
    flag_crc = ProtoField.bool("oppsched.flags.crc", "CRC result known", 8, nil, 0x08),
    flag_crc_ok = ProtoField.bool("oppsched.flags.crc_ok", "CRC ok", 8, nil, 0x10),
    flag_bad = ProtoField.bool("oppsched.flags.bad_message", "Rejected by the daemon", 8, nil,
                               0x20),
    flag_tag = ProtoField.bool("oppsched.flags.tag", "TBs carry the integrity tag", 8, nil, 0x40),
    flag_reserved = ProtoField.uint8("oppsched.flags.reserved", "Reserved", base.HEX, nil, 0x80),
    user = ProtoField.uint16("oppsched.user", "User"),
    slot = ProtoField.uint64("oppsched.slot", "Slot"),
    harq_pid = ProtoField.uint8("oppsched.harq_pid", "HARQ process"),
    ndi = ProtoField.uint8("oppsched.ndi", "NDI"),
    rv = ProtoField.uint8("oppsched.rv", "RV"),
    mcs = ProtoField.uint8("oppsched.mcs", "MCS"),
    tb_len = ProtoField.uint16("oppsched.tb_len", "TB size (bytes)"),
    crc_ok = ProtoField.bool("oppsched.crc_ok", "TB CRC ok"),
    ph_reserved = ProtoField.uint16("oppsched.reserved", "Reserved", base.HEX),
    -- MAC PDU
    pdu_format = ProtoField.uint8("oppsched.pdu.format", "PDU format", base.DEC, PDU_FORMAT),
    pdu_version = ProtoField.uint8("oppsched.pdu.version", "Version"),
    pdu_flags = ProtoField.uint8("oppsched.pdu.flags", "Flags", base.HEX),
    pdu_flag_price = ProtoField.bool("oppsched.pdu.flags.price", "PRICE", 8, nil, 0x01),
    pdu_flag_session = ProtoField.bool("oppsched.pdu.flags.session", "SESSION", 8, nil, 0x02),
    pdu_session = ProtoField.uint16("oppsched.pdu.session", "MAC session", base.HEX),
    pdu_user = ProtoField.uint16("oppsched.pdu.user", "User"),
    pdu_seq = ProtoField.uint32("oppsched.pdu.seq", "Sequence number"),
    pdu_price = ProtoField.float("oppsched.pdu.price", "CLAMP price (s)"),
    pdu_n_segments = ProtoField.uint16("oppsched.pdu.n_segments", "Segments"),
    pdu_payload_len = ProtoField.uint16("oppsched.pdu.payload_len", "Payload length"),
    pdu_padding = ProtoField.uint32("oppsched.pdu.padding", "Padding (bytes)"),
    pdu_crc = ProtoField.uint32("oppsched.pdu.crc", "CRC-32", base.HEX),
    pdu_crc_good = ProtoField.bool("oppsched.pdu.crc_good", "CRC-32 good"),
    pdu_tag = ProtoField.bytes("oppsched.pdu.integrity_tag",
                               "Integrity tag (SipHash-2-4, not checked: the key is secret)"),
    seg_packet_seq = ProtoField.uint16("oppsched.seg.packet_seq", "Packet sequence"),
    seg_packet_len = ProtoField.uint16("oppsched.seg.packet_len", "Packet length"),
    seg_offset = ProtoField.uint16("oppsched.seg.offset", "Offset"),
    seg_len = ProtoField.uint16("oppsched.seg.len", "Segment length"),
    seg_data = ProtoField.bytes("oppsched.seg.data", "Data"),
    c_seq = ProtoField.uint16("oppsched.pdu.compact_seq", "Sequence number (12 bits)"),
    c_price_flag = ProtoField.bool("oppsched.pdu.compact_price", "PRICE", 8, nil, 0x20),
    c_session_flag = ProtoField.bool("oppsched.pdu.compact_session", "SESSION", 8, nil, 0x10),
    c_first = ProtoField.uint16("oppsched.pdu.first", "First packet at"),
    c_continuation = ProtoField.bytes("oppsched.pdu.continuation",
                                      "Continuation of an earlier packet"),
    c_packet = ProtoField.bytes("oppsched.pdu.packet", "Packet (part)"),
    c_packet_len = ProtoField.uint32("oppsched.pdu.packet_len", "Packet length (IP header)"),
    ip_packets = ProtoField.uint16("oppsched.ip_packets", "Complete IP packets"),
    reasm = ProtoField.bytes("oppsched.reassembled", "Reassembled IP packet"),
    reasm_len = ProtoField.uint32("oppsched.reassembled.len", "Reassembled length"),
    reasm_frames = ProtoField.string("oppsched.reassembled.frames", "From the records"),
    -- PHY-MAC messages
    msg_magic = ProtoField.uint32("oppsched.msg.magic", "Magic", base.HEX),
    msg_version = ProtoField.uint8("oppsched.msg.version", "Version"),
    msg_type = ProtoField.uint8("oppsched.msg.type", "Type", base.DEC, MSG_TYPE),
    msg_reserved = ProtoField.uint16("oppsched.msg.reserved", "Reserved", base.HEX),
    msg_seq = ProtoField.uint32("oppsched.msg.seq", "Sequence number"),
    msg_body_len = ProtoField.uint32("oppsched.msg.body_len", "Body length"),
    msg_crc = ProtoField.uint32("oppsched.msg.crc", "CRC-32", base.HEX),
    msg_crc_good = ProtoField.bool("oppsched.msg.crc_good", "CRC-32 good"),
    m_slot = ProtoField.uint64("oppsched.msg.slot", "Slot"),
    m_air_time = ProtoField.int64("oppsched.msg.air_time_ns", "Air time (ns, PHY clock)"),
    m_flags = ProtoField.uint8("oppsched.msg.flags", "Flags", base.HEX),
    m_empty = ProtoField.bool("oppsched.msg.empty", "Empty slot", 8, nil, 0x01),
    m_uplink = ProtoField.bool("oppsched.msg.uplink", "Uplink slot (station's TB)", 8, nil, 0x02),
    m_header_ok = ProtoField.bool("oppsched.msg.header_ok", "Header ok", 8, nil, 0x01),
    m_addressed = ProtoField.bool("oppsched.msg.addressed", "Addressed to this client", 8, nil,
                                  0x02),
    m_crc_ok = ProtoField.bool("oppsched.msg.crc_ok", "TB CRC ok", 8, nil, 0x04),
    m_user = ProtoField.uint16("oppsched.msg.user", "User"),
    m_mcs = ProtoField.uint8("oppsched.msg.mcs", "MCS"),
    m_harq_pid = ProtoField.uint8("oppsched.msg.harq_pid", "HARQ process"),
    m_ndi = ProtoField.uint8("oppsched.msg.ndi", "NDI"),
    m_rv = ProtoField.uint8("oppsched.msg.rv", "RV"),
    m_snr = ProtoField.float("oppsched.msg.snr_db", "SNR (dB)"),
    m_cqi = ProtoField.uint8("oppsched.msg.cqi", "CQI"),
    m_combined = ProtoField.uint8("oppsched.msg.combined", "Transmissions combined"),
    m_ack = ProtoField.uint8("oppsched.msg.ack", "ACK", base.DEC, { [0] = "NACK", [1] = "ACK" }),
    m_tb_bytes = ProtoField.uint16("oppsched.msg.tb_bytes", "Granted TB size (bytes)"),
    m_buffer_bytes = ProtoField.uint64("oppsched.msg.buffer_bytes", "Buffered bytes"),
    m_buffer_packets = ProtoField.uint64("oppsched.msg.buffer_packets", "Buffered packets"),
    m_last_grant = ProtoField.uint64("oppsched.msg.last_grant_slot", "Last grant's slot"),
    m_len = ProtoField.uint16("oppsched.msg.len", "Length"),
    m_bytes = ProtoField.bytes("oppsched.msg.bytes", "Bytes"),
}
local fl = {}
local field_name = {}  -- ProtoField -> its key in f (for error messages)
for k, v in pairs(f) do
    fl[#fl + 1] = v
    field_name[v] = k:gsub("^m_", "")
end
proto.fields = fl

local e = {
    malformed = ProtoExpert.new("oppsched.malformed", "Malformed",
                                expert.group.MALFORMED, expert.severity.ERROR),
    bad_crc = ProtoExpert.new("oppsched.bad_crc", "Bad CRC-32",
                              expert.group.CHECKSUM, expert.severity.ERROR),
    tb_crc_failed = ProtoExpert.new("oppsched.tb_crc_failed", "TB CRC failed at the PHY",
                                    expert.group.CHECKSUM, expert.severity.WARN),
    rejected = ProtoExpert.new("oppsched.rejected", "The daemon rejected this message",
                               expert.group.MALFORMED, expert.severity.ERROR),
    unknown = ProtoExpert.new("oppsched.unknown", "Unknown value (tolerated)",
                              expert.group.UNDECODED, expert.severity.WARN),
    fragment = ProtoExpert.new("oppsched.fragment",
                               "Part of an IP packet split across TBs (reassembled in the "
                               .. "record that completes it)",
                               expert.group.REASSEMBLE, expert.severity.NOTE),
    internal = ProtoExpert.new("oppsched.internal", "Dissector error",
                               expert.group.MALFORMED, expert.severity.ERROR),
}
local el = {}
for _, v in pairs(e) do el[#el + 1] = v end
proto.experts = el

-- A TB inside a slot_grant or rx_indication is also in the capture as its own PDU record;
-- its IP packets are handed on from that record only, so that TCP analysis does not see
-- every segment twice. The preference hands them on from the messages too.
proto.prefs.message_ip = Pref.bool("Dissect IP packets inside messages", false,
    "Also hand the IP packets of the TB inside slot_grant and rx_indication messages to the "
    .. "IP dissector (they are already dissected in the MAC PDU records)")

-- pdu.integrity_tag (docs/security.md): every TB, downlink and uplink, ends in an 8-byte tag
-- after the MAC PDU. A daemon that tags sets the TAG flag (0x40) of every record's
-- pseudo-header; the preference follows it (auto) or overrides it (captures from before the
-- flag: on).
local TAG_AUTO, TAG_ON, TAG_OFF = 0, 1, 2
proto.prefs.integrity_tag = Pref.enum("TBs carry the PDU integrity tag", TAG_AUTO,
    "auto: as each record's TAG flag says (set by a daemon with pdu.integrity_tag on); on: the "
    .. "last 8 bytes of every TB are its SipHash-2-4 tag, not part of the MAC PDU (captures "
    .. "written before the flag); off: no TB carries one",
    { { "auto", "auto (the records' TAG flag)", TAG_AUTO },
      { "on", "on (every TB)", TAG_ON },
      { "off", "off (no TB)", TAG_OFF } }, false)

local ip_dissector = Dissector.get("ip")
local ipv6_dissector = Dissector.get("ipv6")

-- CRC-32 (IEEE 802.3, zlib's) of tvb bytes [off, off + len).
local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit32.band(c, 1) == 1 then
            c = bit32.bxor(0xEDB88320, bit32.rshift(c, 1))
        else
            c = bit32.rshift(c, 1)
        end
    end
    crc_table[i] = c
end
local function crc32(tvb, off, len)
    local crc = 0xFFFFFFFF
    if len > 0 then
        local s = tvb:raw(off, len)
        local band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
        for i = 1, #s, 4096 do
            local bytes = { s:byte(i, math.min(i + 4095, #s)) }
            for k = 1, #bytes do
                crc = bxor(crc_table[band(bxor(crc, bytes[k]), 0xFF)], rshift(crc, 8))
            end
        end
    end
    return bit32.bnot(crc)
end

local function u8(tvb, off) return tvb(off, 1):uint() end
local function u16(tvb, off) return tvb(off, 2):uint() end

-- Hands a complete IP packet to ip/ipv6; returns true if it did (or would have, with
-- hand_on false).
local hand_on = true
-- Whether the TBs of the record being dissected end in the integrity tag.
local tagged = false
local function hand_to_ip(tvb, off, len, pinfo, tree)
    if len < 1 then return false end
    if not hand_on then
        local v = bit32.rshift(u8(tvb, off), 4)
        return v == 4 or v == 6
    end
    local v = bit32.rshift(u8(tvb, off), 4)
    local sub = tvb(off, len):tvb()
    if v == 4 and ip_dissector then
        ip_dissector:call(sub, pinfo, tree)
        return true
    elseif v == 6 and ipv6_dissector then
        ipv6_dissector:call(sub, pinfo, tree)
        return true
    end
    return false
end

-- Reassembly. A packet split across TBs continues at the start of the next TB of its user
-- (pdu.h), so it is rebuilt from the PDU records of one stream: (direction, user, format),
-- TBs whose CRC failed left out. It is built on the first pass over the capture
-- (pinfo.visited false), in record order, and kept per record, so that later passes (a
-- click in Wireshark, tshark -2) show the same. HARQ retransmissions repeat a TB: the
-- standard format keys each part by (packet_seq, offset), the compact one drops a PDU
-- whose 12-bit sequence number it has passed; the compact format also puts PDUs received
-- out of order (HARQ) back in order, and gives up a packet whose next PDU is missing once
-- 64 later PDUs have come.
local streams = {}      -- stream key -> state
local completed = {}    -- record number -> { {data = raw bytes, frames = {n, ...}}, ... }
local reasm_stream = nil  -- the stream of the record being dissected; nil: do not collect
local COMPACT_WINDOW = 64

function proto.init()
    streams, completed = {}, {}
end

local function stream_state(key)
    local st = streams[key]
    if not st then
        st = { packets = {}, pdus = {}, n_pdus = 0 }
        streams[key] = st
    end
    return st
end

local function add_frame(frames, n)
    if frames[#frames] ~= n then frames[#frames + 1] = n end
end

local function complete(n, data, frames)
    local list = completed[n]
    if not list then
        list = {}
        completed[n] = list
    end
    list[#list + 1] = { data = data, frames = frames }
end

-- Standard format: one part of packet `seq` (length `total`) at `off`.
local function collect_standard(pinfo, seq, total, off, data)
    if not reasm_stream or pinfo.visited then return end
    local st = stream_state(reasm_stream)
    local p = st.packets[seq]
    if p and p.total ~= total then p = nil end  -- a new packet after the 16-bit wrap
    if not p then
        p = { total = total, parts = {}, frames = {} }
        st.packets[seq] = p
    end
    if p.parts[off] then return end  -- a retransmitted TB
    p.parts[off] = data
    add_frame(p.frames, pinfo.number)
    local pos, out = 0, {}
    while p.parts[pos] do
        out[#out + 1] = p.parts[pos]
        pos = pos + #p.parts[pos]
    end
    if pos == total then
        st.packets[seq] = nil
        complete(pinfo.number, table.concat(out), p.frames)
    end
end

-- The length an IP packet's header gives, once enough of it is there (nil before).
local function ip_length(bytes)
    local v = bytes:byte(1) and bit32.rshift(bytes:byte(1), 4)
    if v == 4 and #bytes >= 4 then return bytes:byte(3) * 256 + bytes:byte(4) end
    if v == 6 and #bytes >= 6 then return 40 + bytes:byte(5) * 256 + bytes:byte(6) end
    return nil
end

-- Compact format: one PDU of the stream, in stream order.
local function consume_compact(st, q, n)
    if st.pending then
        if q.cont == nil then
            st.pending = nil  -- nothing continues it: its rest was lost
        else
            st.pending = st.pending .. q.cont
            add_frame(st.frames, q.frame)
            local want = ip_length(st.pending)
            if want and #st.pending >= want then
                if #st.pending == want then complete(n, st.pending, st.frames) end
                st.pending = nil
            elseif not q.nostart then
                st.pending = nil  -- a packet starts here, so the earlier one had to end
            end
        end
    end
    if q.tail then
        st.pending, st.frames = q.tail, { q.frame }
    end
end

-- Compact format: a PDU with sequence number `seq`; cont: the bytes that continue an
-- earlier packet (nil: none), nostart: every byte does, tail: the start of the packet that
-- runs past its end (nil: none).
local function collect_compact(pinfo, seq, cont, nostart, tail)
    if not reasm_stream or pinfo.visited then return end
    local st = stream_state(reasm_stream)
    if st.expect == nil then st.expect = seq end
    local d = (seq - st.expect) % 4096
    if d >= 2048 or st.pdus[seq] then return end  -- passed already, or a repeat
    st.pdus[seq] = { cont = cont, nostart = nostart, tail = tail, frame = pinfo.number }
    st.n_pdus = st.n_pdus + 1
    while true do
        while st.pdus[st.expect] do
            local q = st.pdus[st.expect]
            st.pdus[st.expect] = nil
            st.n_pdus = st.n_pdus - 1
            consume_compact(st, q, pinfo.number)
            st.expect = (st.expect + 1) % 4096
        end
        if st.n_pdus <= COMPACT_WINDOW then break end
        -- the PDU awaited is lost: its packet too; go on from the next one there is
        st.pending = nil
        local best
        for s in pairs(st.pdus) do
            local ds = (s - st.expect) % 4096
            if not best or ds < best then best = ds end
        end
        st.expect = (st.expect + best) % 4096
    end
end

-- The packets record `pinfo.number` completes, handed to ip/ipv6; returns how many.
local function hand_on_completed(pinfo, tree, ptree)
    local list = completed[pinfo.number]
    if not list then return 0 end
    local n = 0
    for _, r in ipairs(list) do
        local rt = ByteArray.new(r.data, true):tvb("Reassembled IP packet")
        local frames = {}
        for i, fr in ipairs(r.frames) do frames[i] = tostring(fr) end
        local it = ptree:add(f.reasm, rt(), "")
        it:set_text(string.format("Reassembled IP packet: %d bytes from records %s", #r.data,
                                  table.concat(frames, ", ")))
        it:add(f.reasm_len, rt(), #r.data)
        it:add(f.reasm_frames, rt(), table.concat(frames, ","))
        if hand_to_ip(rt, 0, rt:len(), pinfo, tree) then n = n + 1 end
    end
    return n
end

-- The standard PDU format (pdu.h): header, segments, padding, CRC.
local function dissect_standard(tvb, off, len, pinfo, tree, ptree)
    local n_ip = 0
    if len < 20 then
        ptree:add_tvb_expert_info(e.malformed, tvb(off, len),
            string.format("standard PDU of %d bytes, shorter than its 20-byte minimum", len))
        return 0
    end
    ptree:add(f.pdu_version, tvb(off, 1))
    local fr = tvb(off + 1, 1)
    local ft = ptree:add(f.pdu_flags, fr)
    ft:add(f.pdu_flag_price, fr)
    ft:add(f.pdu_flag_session, fr)
    local flags = fr:uint()
    if bit32.band(flags, 0xFC) ~= 0 then
        ft:add_tvb_expert_info(e.unknown, fr,
            string.format("PDU flags 0x%02x: unknown bits 0x%02x", flags, bit32.band(flags, 0xFC)))
    end
    local session = bit32.band(flags, 0x02) ~= 0 and len >= 22
    ptree:add(f.pdu_user, tvb(off + 2, 2))
    ptree:add(f.pdu_seq, tvb(off + 4, 4))
    ptree:add(f.pdu_price, tvb(off + 8, 4))
    local n_seg = u16(tvb, off + 12)
    local payload_len = u16(tvb, off + 14)
    ptree:add(f.pdu_n_segments, tvb(off + 12, 2))
    local plt = ptree:add(f.pdu_payload_len, tvb(off + 14, 2))
    local crc_at = off + len - 4
    local stored = tvb(crc_at, 4):uint()
    local computed = crc32(tvb, off, len - 4)
    -- With SESSION the 2-byte session trailer sits before the CRC (pdu.h).
    local tail_at = session and crc_at - 2 or crc_at
    local payload_end = off + 16 + payload_len
    if payload_end > tail_at then
        plt:add_tvb_expert_info(e.malformed, tvb(off + 14, 2),
            string.format("payload_len %d exceeds the %d bytes between header and %s",
                          payload_len, tail_at - off - 16, session and "session" or "CRC"))
        payload_end = tail_at
    end
    local pos = off + 16
    for i = 1, n_seg do
        if pos + 8 > payload_end then
            ptree:add_tvb_expert_info(e.malformed, tvb(off + 12, 2),
                string.format("n_segments %d: segment %d header does not fit the payload",
                              n_seg, i))
            break
        end
        local packet_seq, packet_len = u16(tvb, pos), u16(tvb, pos + 2)
        local seg_off, seg_len = u16(tvb, pos + 4), u16(tvb, pos + 6)
        local avail = payload_end - (pos + 8)
        local shown = math.min(seg_len, avail)
        local st = ptree:add(proto, tvb(pos, 8 + shown), string.format(
            "Segment %d: packet %d, bytes %d..%d of %d", i, packet_seq, seg_off,
            seg_off + seg_len, packet_len))
        st:add(f.seg_packet_seq, tvb(pos, 2))
        st:add(f.seg_packet_len, tvb(pos + 2, 2))
        st:add(f.seg_offset, tvb(pos + 4, 2))
        local lt = st:add(f.seg_len, tvb(pos + 6, 2))
        if shown > 0 then st:add(f.seg_data, tvb(pos + 8, shown)) end
        if seg_len > avail then
            lt:add_tvb_expert_info(e.malformed, tvb(pos + 6, 2),
                string.format("seg_len %d exceeds the %d payload bytes left", seg_len, avail))
            break
        end
        if seg_len == 0 or packet_len == 0 or seg_off + seg_len > packet_len then
            lt:add_tvb_expert_info(e.malformed, tvb(pos, 8), string.format(
                "segment %d: offset %d + seg_len %d against packet_len %d", i, seg_off,
                seg_len, packet_len))
        elseif seg_off == 0 and seg_len == packet_len then
            if hand_to_ip(tvb, pos + 8, seg_len, pinfo, tree) then n_ip = n_ip + 1 end
        else
            st:add_proto_expert_info(e.fragment)
            collect_standard(pinfo, packet_seq, packet_len, seg_off, tvb:raw(pos + 8, seg_len))
        end
        pos = pos + 8 + seg_len
    end
    ptree:add(f.pdu_padding, tvb(off, 0), math.max(tail_at - (off + 16 + payload_len), 0))
    if session then ptree:add(f.pdu_session, tvb(tail_at, 2)) end
    local ct = ptree:add(f.pdu_crc, tvb(crc_at, 4))
    ct:add(f.pdu_crc_good, tvb(crc_at, 4), stored == computed)
    if stored ~= computed then
        ct:add_tvb_expert_info(e.bad_crc, tvb(crc_at, 4),
            string.format("PDU CRC-32 0x%08x, computed 0x%08x", stored, computed))
    end
    return n_ip
end

-- The compact PDU format (pdu.h): header, continuation, packets from `first`, padding.
local function dissect_compact(tvb, off, len, pinfo, tree, ptree)
    local n_ip = 0
    local b0 = u8(tvb, off)
    local priced = bit32.band(b0, 0x20) ~= 0
    local hdr = priced and 8 or 4
    local session = bit32.band(b0, 0x10) ~= 0
    ptree:add(f.c_price_flag, tvb(off, 1))
    ptree:add(f.c_session_flag, tvb(off, 1))
    if session then
        -- The last 2 bytes of the TB are the session (pdu.h); the payload ends before them.
        if len >= hdr + 3 then ptree:add(f.pdu_session, tvb(off + len - 2, 2)) end
        len = len - 2
    end
    if len < hdr + 1 then
        ptree:add_tvb_expert_info(e.malformed, tvb(off, len), string.format(
            "compact PDU of %d bytes, shorter than its header (%d) and one byte", len, hdr))
        return 0
    end
    ptree:add(f.c_seq, tvb(off, 2), bit32.bor(bit32.lshift(bit32.band(b0, 0x0F), 8),
                                             u8(tvb, off + 1)))
    local first = u16(tvb, off + 2)
    local ftree = ptree:add(f.c_first, tvb(off + 2, 2))
    if priced then ptree:add(f.pdu_price, tvb(off + 4, 4)) end
    local p0 = off + hdr
    local plen = len - hdr
    local seq = bit32.bor(bit32.lshift(bit32.band(b0, 0x0F), 8), u8(tvb, off + 1))
    if first == COMPACT_NO_START then
        ptree:add(f.c_continuation, tvb(p0, plen))
        ptree:add_proto_expert_info(e.fragment)
        collect_compact(pinfo, seq, tvb:raw(p0, plen), true, nil)
        return 0
    end
    if first >= plen then
        ftree:add_tvb_expert_info(e.malformed, tvb(off + 2, 2),
            string.format("first %d is not below the payload length %d", first, plen))
        return 0
    end
    if first > 0 then
        ptree:add(f.c_continuation, tvb(p0, first))
    end
    local cont = first > 0 and tvb:raw(p0, first) or nil
    local tail = nil
    local pos = first
    while pos < plen do
        local v = bit32.rshift(u8(tvb, p0 + pos), 4)
        if u8(tvb, p0 + pos) == 0 then
            ptree:add(f.pdu_padding, tvb(p0 + pos, plen - pos), plen - pos)
            break
        end
        local avail = plen - pos
        local plen_ip = nil
        if v == 4 then
            if avail >= 4 then plen_ip = u16(tvb, p0 + pos + 2) end
        elseif v == 6 then
            if avail >= 6 then plen_ip = 40 + u16(tvb, p0 + pos + 4) end
        else
            ptree:add_tvb_expert_info(e.malformed, tvb(p0 + pos, 1), string.format(
                "byte 0x%02x at payload offset %d starts no IPv4/IPv6 packet",
                u8(tvb, p0 + pos), pos))
            break
        end
        local here = plen_ip and math.min(plen_ip, avail) or avail
        local pt = ptree:add(f.c_packet, tvb(p0 + pos, here))
        if plen_ip then
            pt:add(f.c_packet_len, tvb(p0 + pos, math.min(avail, 6)), plen_ip)
            if (v == 4 and plen_ip < 20) or (v == 6 and plen_ip > 65535) then
                pt:add_tvb_expert_info(e.malformed, tvb(p0 + pos, math.min(avail, 6)),
                    string.format("IP packet length %d is invalid", plen_ip))
                break
            end
        end
        if plen_ip and plen_ip <= avail then
            if hand_to_ip(tvb, p0 + pos, plen_ip, pinfo, tree) then n_ip = n_ip + 1 end
        else
            pt:add_proto_expert_info(e.fragment)
            tail = tvb:raw(p0 + pos, here)
        end
        pos = pos + here
    end
    collect_compact(pinfo, seq, cont, false, tail)
    return n_ip
end

-- A MAC PDU (TB) at tvb [off, off + len). Returns the number of IP packets handed on.
local function dissect_pdu(tvb, off, len, pinfo, tree, ip)
    hand_on = ip ~= false
    if tagged and len >= 8 then
        tree:add(f.pdu_tag, tvb(off + len - 8, 8))
        len = len - 8
    end
    local ptree = tree:add(proto, tvb(off, len), string.format("MAC PDU (%d bytes)", len))
    if len < 1 then
        ptree:add_proto_expert_info(e.malformed, "empty TB")
        return 0
    end
    local b0 = u8(tvb, off)
    if b0 == 1 then
        ptree:add(f.pdu_format, tvb(off, 1), 1)
        if reasm_stream then reasm_stream = reasm_stream .. ":1" end
        local n = dissect_standard(tvb, off, len, pinfo, tree, ptree)
        return n + (hand_on and hand_on_completed(pinfo, tree, ptree) or 0)
    elseif bit32.band(b0, 0xC0) == 0x80 then
        ptree:add(f.pdu_format, tvb(off, 1), 2)
        if reasm_stream then reasm_stream = reasm_stream .. ":2" end
        local n = dissect_compact(tvb, off, len, pinfo, tree, ptree)
        return n + (hand_on and hand_on_completed(pinfo, tree, ptree) or 0)
    end
    ptree:add_tvb_expert_info(e.malformed, tvb(off, 1), string.format(
        "first byte 0x%02x names no PDU format (0x01 standard, 0x80..0xBF compact)", b0))
    return 0
end

-- A PHY-MAC wire frame at tvb [off, end). Returns a summary and a function that dissects
-- what the message carries (a PDU, an IP packet) and returns the IP packets handed on, to be
-- called once the summary is in the Info column.
local function dissect_message(tvb, off, pinfo, tree)
    local len = tvb:len() - off
    local mt = tree:add(proto, tvb(off, len), "PHY-MAC message")
    if len < 20 then
        mt:add_tvb_expert_info(e.malformed, tvb(off, len),
            string.format("wire frame of %d bytes, shorter than header and CRC (20)", len))
        return "short message", nil
    end
    local magic = tvb(off, 4):uint()
    local mg = mt:add(f.msg_magic, tvb(off, 4))
    if magic ~= WIRE_MAGIC then
        mg:add_tvb_expert_info(e.malformed, tvb(off, 4),
            string.format("magic 0x%08x, not 0x%08x (\"OPPS\")", magic, WIRE_MAGIC))
        return "bad magic", nil
    end
    local vt = mt:add(f.msg_version, tvb(off + 4, 1))
    if u8(tvb, off + 4) ~= 1 then
        vt:add_tvb_expert_info(e.unknown, tvb(off + 4, 1),
            string.format("wire version %d (this dissector knows 1)", u8(tvb, off + 4)))
    end
    local mtype = u8(tvb, off + 5)
    local name = MSG_TYPE[mtype] or string.format("type %d", mtype)
    mt:set_text("PHY-MAC message: " .. name)
    mt:add(f.msg_type, tvb(off + 5, 1))
    mt:add(f.msg_reserved, tvb(off + 6, 2))
    mt:add(f.msg_seq, tvb(off + 8, 4))
    local body_len = tvb(off + 12, 4):uint()
    local bt = mt:add(f.msg_body_len, tvb(off + 12, 4))
    if 16 + body_len + 4 ~= len then
        bt:add_tvb_expert_info(e.malformed, tvb(off + 12, 4), string.format(
            "body_len %d: the frame has %d bytes, not 16 + %d + 4", body_len, len, body_len))
        if 16 + body_len + 4 > len then return name .. " (truncated)", nil end
    end
    local crc_at = off + 16 + body_len
    local stored = tvb(crc_at, 4):uint()
    local computed = crc32(tvb, off, 16 + body_len)
    local ct = mt:add(f.msg_crc, tvb(crc_at, 4))
    ct:add(f.msg_crc_good, tvb(crc_at, 4), stored == computed)
    if stored ~= computed then
        ct:add_tvb_expert_info(e.bad_crc, tvb(crc_at, 4),
            string.format("message CRC-32 0x%08x, computed 0x%08x", stored, computed))
    end

    -- The body, field by field (wire.h); a field past the body's end is an error.
    local pos, body_end = off + 16, crc_at
    local short = false
    local function take(field, size, t)
        if short then return nil end
        if pos + size > body_end then
            mt:add_tvb_expert_info(e.malformed, tvb(off + 12, 4), string.format(
                "%s body of %d bytes ends before its field %s", name, body_len,
                field_name[field] or "?"))
            short = true
            return nil
        end
        local r = tvb(pos, size)
        local item = (t or mt):add(field, r)
        pos = pos + size
        return r, item
    end
    local function take_bytes(len_field, data_field)
        local r = take(len_field, 2)
        if not r then return nil end
        local n = r:uint()
        if pos + n > body_end then
            mt:add_tvb_expert_info(e.malformed, r, string.format(
                "length %d exceeds the %d body bytes left", n, body_end - pos))
            short = true
            return nil
        end
        local at = pos
        if n > 0 then mt:add(data_field, tvb(at, n)) end
        pos = pos + n
        return at, n
    end
    local summary = name
    local sub = nil
    if mtype == 1 then
        local s = take(f.m_slot, 8)
        take(f.m_air_time, 8)
        if s then summary = string.format("%s slot %s", name, s:uint64()) end
    elseif mtype == 2 then
        local s = take(f.m_slot, 8)
        local fr, ft = take(f.m_flags, 1)
        local empty, uplink = false, false
        if fr then
            ft:add(f.m_empty, fr)
            ft:add(f.m_uplink, fr)
            empty = bit32.band(fr:uint(), 1) ~= 0
            uplink = bit32.band(fr:uint(), 2) ~= 0
            if bit32.band(fr:uint(), 0xFC) ~= 0 then
                ft:add_tvb_expert_info(e.unknown, fr, string.format(
                    "slot_grant flags 0x%02x: unknown bits 0x%02x", fr:uint(),
                    bit32.band(fr:uint(), 0xFC)))
            end
        end
        local u = take(f.m_user, 2)
        take(f.m_mcs, 1); take(f.m_harq_pid, 1); take(f.m_ndi, 1); take(f.m_rv, 1)
        local at, n = take_bytes(f.m_len, f.m_bytes)
        if s then
            summary = string.format("%s slot %s%s", name, s:uint64(),
                                    empty and " empty" or (u and ((uplink and " uplink station "
                                    or " user ") .. u:uint()) or ""))
        end
        if at and n > 0 and not empty then
            sub = function()
                return dissect_pdu(tvb, at, n, pinfo, tree, proto.prefs.message_ip)
            end
        end
    elseif mtype == 3 then
        local s = take(f.m_slot, 8)
        local u = take(f.m_user, 2)
        take(f.m_mcs, 1); take(f.m_harq_pid, 1); take(f.m_ndi, 1); take(f.m_rv, 1)
        local fr, ft = take(f.m_flags, 1)
        if fr then
            ft:add(f.m_header_ok, fr); ft:add(f.m_addressed, fr); ft:add(f.m_crc_ok, fr)
            if bit32.band(fr:uint(), 0xF8) ~= 0 then
                ft:add_tvb_expert_info(e.unknown, fr, string.format(
                    "rx_indication flags 0x%02x: unknown bits", fr:uint()))
            end
        end
        take(f.m_snr, 4); take(f.m_cqi, 1); take(f.m_combined, 1)
        local at, n = take_bytes(f.m_len, f.m_bytes)
        if s then
            summary = string.format("%s slot %s user %s", name, s:uint64(), u and u:uint() or "?")
        end
        if at and n > 0 then
            if fr and bit32.band(fr:uint(), 0x04) == 0 then
                mt:add_proto_expert_info(e.tb_crc_failed)
            end
            sub = function()
                return dissect_pdu(tvb, at, n, pinfo, tree, proto.prefs.message_ip)
            end
        end
    elseif mtype == 4 then
        local u = take(f.m_user, 2)
        local s = take(f.m_slot, 8)
        take(f.m_snr, 4)
        local c = take(f.m_cqi, 1)
        if c then
            summary = string.format("%s user %d slot %s cqi %d", name, u:uint(), s:uint64(),
                                    c:uint())
        end
    elseif mtype == 5 then
        local u = take(f.m_user, 2)
        local s = take(f.m_slot, 8)
        local h = take(f.m_harq_pid, 1)
        local a, at = take(f.m_ack, 1)
        if a then
            if a:uint() > 1 then
                at:add_tvb_expert_info(e.malformed, a,
                                       string.format("ack %d is neither 0 nor 1", a:uint()))
            end
            summary = string.format("%s user %d slot %s harq %d %s", name, u:uint(),
                                    s:uint64(), h:uint(), a:uint() == 1 and "ACK" or "NACK")
        end
    elseif mtype == 6 then
        local u = take(f.m_user, 2)
        local at, n = take_bytes(f.m_len, f.m_bytes)
        if u then summary = string.format("%s user %d", name, u:uint()) end
        if at and n > 0 then
            sub = function() return hand_to_ip(tvb, at, n, pinfo, tree) and 1 or 0 end
        end
    elseif mtype == 7 then
        local u = take(f.m_user, 2)
        local s = take(f.m_slot, 8)
        take(f.m_air_time, 8)
        local m = take(f.m_mcs, 1)
        local h = take(f.m_harq_pid, 1)
        take(f.m_ndi, 1); take(f.m_rv, 1)
        local b = take(f.m_tb_bytes, 2)
        if b then
            summary = string.format("%s station %d slot %s mcs %d harq %d %d bytes", name,
                                    u:uint(), s:uint64(), m:uint(), h:uint(), b:uint())
        end
    elseif mtype == 8 then
        local u = take(f.m_user, 2)
        local s = take(f.m_slot, 8)
        take(f.m_harq_pid, 1); take(f.m_ndi, 1)
        local bb = take(f.m_buffer_bytes, 8)
        take(f.m_buffer_packets, 8)
        local at, n = take_bytes(f.m_len, f.m_bytes)
        if bb then
            summary = string.format("%s station %d slot %s, %s bytes buffered", name, u:uint(),
                                    s:uint64(), bb:uint64())
        end
        if at and n > 0 then
            sub = function()
                return dissect_pdu(tvb, at, n, pinfo, tree, proto.prefs.message_ip)
            end
        end
    elseif mtype == 9 then
        local u = take(f.m_user, 2)
        take(f.m_last_grant, 8)
        local bb = take(f.m_buffer_bytes, 8)
        local bp = take(f.m_buffer_packets, 8)
        if bp then
            summary = string.format("%s station %d: %s bytes, %s packets", name, u:uint(),
                                    bb:uint64(), bp:uint64())
        end
    else
        mt:add_tvb_expert_info(e.unknown, tvb(off + 5, 1),
            string.format("message type %d is unknown; body not decoded", mtype))
        if body_len > 0 then mt:add(f.m_bytes, tvb(pos, body_len)) end
        pos = body_end
    end
    if not short and pos < body_end then
        mt:add_tvb_expert_info(e.malformed, tvb(pos, body_end - pos), string.format(
            "%d bytes after the last field of %s", body_end - pos, name))
    end
    return summary, sub
end

local function dissect_record(tvb, pinfo, tree)
    hand_on = true
    tagged = false
    reasm_stream = nil
    local len = tvb:len()
    pinfo.cols.protocol = "OPPSCHED"
    local t = tree:add(proto, tvb(), "oppsched MAC capture")
    if len < 2 then
        t:add_proto_expert_info(e.malformed,
            string.format("record of %d bytes, shorter than the pseudo-header", len))
        pinfo.cols.info = "malformed record"
        return
    end
    local version, hlen = u8(tvb, 0), u8(tvb, 1)
    local vt = t:add(f.version, tvb(0, 1))
    local ht = t:add(f.header_len, tvb(1, 1))
    if hlen < HEADER_LEN or hlen > len then
        ht:add_tvb_expert_info(e.malformed, tvb(1, 1), string.format(
            "header_len %d: not in [%d, record length %d]", hlen, HEADER_LEN, len))
        pinfo.cols.info = "malformed record"
        return
    end
    if version ~= 1 then
        vt:add_tvb_expert_info(e.unknown, tvb(0, 1),
            string.format("capture version %d (this dissector knows 1)", version))
    end
    local kind, dir, port, flags = u8(tvb, 2), u8(tvb, 3), u8(tvb, 4), u8(tvb, 5)
    local kt = t:add(f.kind, tvb(2, 1))
    t:add(f.direction, tvb(3, 1))
    t:add(f.port, tvb(4, 1))
    local fr = tvb(5, 1)
    local ft = t:add(f.flags, fr)
    for _, b in ipairs({ f.flag_slot, f.flag_user, f.flag_harq, f.flag_crc, f.flag_crc_ok,
                         f.flag_bad, f.flag_tag, f.flag_reserved }) do
        ft:add(b, fr)
    end
    local pref = proto.prefs.integrity_tag
    tagged = pref == TAG_ON or (pref == TAG_AUTO and bit32.band(flags, 0x40) ~= 0)
    if bit32.band(flags, 0x80) ~= 0 then
        ft:add_tvb_expert_info(e.unknown, fr,
            string.format("pseudo-header flags 0x%02x: unknown bits", flags))
    end
    local summary = {}
    if bit32.band(flags, 0x01) ~= 0 then
        t:add(f.slot, tvb(8, 8))
        summary[#summary + 1] = "slot " .. tostring(tvb(8, 8):uint64())
    end
    if bit32.band(flags, 0x02) ~= 0 then
        t:add(f.user, tvb(6, 2))
        summary[#summary + 1] = "user " .. u16(tvb, 6)
    end
    if bit32.band(flags, 0x04) ~= 0 then
        t:add(f.harq_pid, tvb(16, 1))
        t:add(f.ndi, tvb(17, 1))
        t:add(f.rv, tvb(18, 1))
        t:add(f.mcs, tvb(19, 1))
        t:add(f.tb_len, tvb(20, 2))
        summary[#summary + 1] = string.format("mcs %d harq %d ndi %d rv %d", u8(tvb, 19),
                                              u8(tvb, 16), u8(tvb, 17), u8(tvb, 18))
    end
    local crc_failed = false
    if bit32.band(flags, 0x08) ~= 0 then
        local ok = bit32.band(flags, 0x10) ~= 0
        t:add(f.crc_ok, fr, ok)
        summary[#summary + 1] = ok and "CRC ok" or "CRC failed"
        crc_failed = not ok
    end
    t:add(f.ph_reserved, tvb(22, 2))
    if bit32.band(flags, 0x20) ~= 0 then
        t:add_proto_expert_info(e.rejected)
    end
    pinfo.cols.src = (dir == 0) and "this daemon" or (PORT[port] or tostring(port))
    pinfo.cols.dst = (dir == 1) and "this daemon" or (PORT[port] or tostring(port))
    local what
    local n_ip = 0
    local head = (DIRECTION[dir] or ("direction " .. dir))
    if kind == 1 then
        if crc_failed then t:add_proto_expert_info(e.tb_crc_failed) end
        local tb_len = u16(tvb, 20)
        if bit32.band(flags, 0x04) ~= 0 and tb_len ~= len - hlen then
            t:add_tvb_expert_info(e.malformed, tvb(20, 2), string.format(
                "tb_len %d, but the record holds %d TB bytes", tb_len, len - hlen))
        end
        pinfo.cols.info = string.format("PDU %s %s ", head, table.concat(summary, " "))
        pinfo.cols.info:fence()
        if not crc_failed then
            -- the stream: direction and user (the pseudo-header's, if it has one)
            reasm_stream = string.format("%d:%d", dir,
                                         bit32.band(flags, 0x02) ~= 0 and u16(tvb, 6) or -1)
        end
        n_ip = dissect_pdu(tvb, hlen, len - hlen, pinfo, tree)
        reasm_stream = nil
    elseif kind == 2 then
        local sub
        what, sub = dissect_message(tvb, hlen, pinfo, tree)
        pinfo.cols.info = string.format("%s %s %s ", what, head, PORT[port] or tostring(port))
        pinfo.cols.info:fence()
        if sub then n_ip = sub() end
    else
        kt:add_tvb_expert_info(e.unknown, tvb(2, 1),
            string.format("record kind %d is unknown; payload not decoded", kind))
        pinfo.cols.info = string.format("record kind %d", kind)
    end
    t:add(f.ip_packets, tvb(0, 0), n_ip)
end

function proto.dissector(tvb, pinfo, tree)
    -- A bug here must not hide the record: report it as an expert info.
    local ok, err = pcall(dissect_record, tvb, pinfo, tree)
    if not ok then
        tree:add_proto_expert_info(e.internal, "oppsched dissector error: " .. tostring(err))
    end
    return tvb:len()
end

DissectorTable.get("wtap_encap"):add(wtap_encaps.USER0, proto)
