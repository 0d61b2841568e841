//! Every packet starts with a 24-byte header, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `PTLP` |
//! | 4..6 | format version |
//! | 6..8 | kind: 1 metadata, 2 events, 3 status |
//! | 8..16 | sequence number: 0 for the metadata, then 1, 2, ... in write order |
//! | 16..20 | payload length |
//! | 20..24 | CRC-32 (IEEE) of bytes 0..20 and the payload |

/// The first four bytes of every packet.
pub const MAGIC: [u8; 4] = *b"PTLP";
/// Bytes of a packet header.
pub const HEADER_LEN: usize = 24;
/// No packet is larger; a header claiming more is corrupt, not a reason to allocate.
pub const MAX_PAYLOAD: u32 = 16 << 20;

/// What a packet holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// The log's metadata (JSON): the first packet.
    Metadata = 1,
    /// Events.
    Events = 2,
    /// The final status (JSON): the last packet of a closed log.
    Status = 3,
}

/// A packet header as read; its CRC is checked with [`Header::check`] once the payload is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The log format version it was written with.
    pub version: u16,
    /// What it holds.
    pub kind: Kind,
    /// Its sequence number (metadata 0, events from 1).
    pub seq: u64,
    /// Bytes of payload after the header.
    pub payload_len: u32,
    crc: u32,
    bytes: [u8; 20],
}

/// Why 24 bytes are not a packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadHeader {
    /// It does not begin with [`MAGIC`].
    Magic,
    /// Its kind is none of [`Kind`]'s.
    Kind(u16),
    /// It claims more payload than [`MAX_PAYLOAD`].
    Length(u32),
}

impl Header {
    /// Reads a header's fields (its CRC is checked later, with the payload).
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Header, BadHeader> {
        if bytes[0..4] != MAGIC {
            return Err(BadHeader::Magic);
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or_default());
        let kind = match u16_at(6) {
            1 => Kind::Metadata,
            2 => Kind::Events,
            3 => Kind::Status,
            other => return Err(BadHeader::Kind(other)),
        };
        let payload_len = u32_at(16);
        if payload_len > MAX_PAYLOAD {
            return Err(BadHeader::Length(payload_len));
        }
        let mut covered = [0u8; 20];
        covered.copy_from_slice(&bytes[..20]);
        Ok(Header {
            version: u16_at(4),
            kind,
            seq: u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default()),
            payload_len,
            crc: u32_at(20),
            bytes: covered,
        })
    }

    /// Whether `payload` is the one this header was written with.
    pub fn check(&self, payload: &[u8]) -> bool {
        checksum(&self.bytes, payload) == self.crc
    }
}

/// The CRC-32 a packet carries: of its header's first 20 bytes, then its payload.
pub fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header);
    hasher.update(payload);
    hasher.finalize()
}

/// A whole packet: header, then `payload`.
pub fn seal(kind: Kind, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut packet = Vec::new();
    seal_parts_into(kind, seq, &[payload], &mut packet);
    packet
}

/// Appends to `out` the whole packet whose payload is `parts` one after another, each copied
/// once (an events packet's context and entries): packets that go to the file together are
/// sealed into one buffer.
pub fn seal_parts_into(kind: Kind, seq: u64, parts: &[&[u8]], out: &mut Vec<u8>) {
    let payload_len: usize = parts.iter().map(|part| part.len()).sum();
    out.reserve(HEADER_LEN + payload_len);
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&super::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(kind as u16).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&out[start..]);
    for part in parts {
        hasher.update(part);
    }
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(packet: &[u8]) -> Result<Header, BadHeader> {
        Header::parse(packet[..HEADER_LEN].try_into().unwrap())
    }

    #[test]
    fn a_sealed_packet_checks_and_any_flipped_bit_does_not() {
        let packet = seal(Kind::Events, 7, b"payload");
        let header = header_of(&packet).unwrap();
        assert_eq!(
            (header.kind, header.seq, header.payload_len),
            (Kind::Events, 7, 7)
        );
        assert!(header.check(&packet[HEADER_LEN..]));
        for bit in 0..packet.len() * 8 {
            let mut damaged = packet.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let intact = header_of(&damaged).is_ok_and(|h| h.check(&damaged[HEADER_LEN..]));
            assert!(!intact, "bit {bit} flipped and the packet still checks");
        }
    }

    #[test]
    fn huge_lengths_and_unknown_kinds_are_refused() {
        let mut packet = seal(Kind::Status, 1, b"");
        packet[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(header_of(&packet), Err(BadHeader::Length(u32::MAX)));
        packet[6] = 9;
        assert_eq!(header_of(&packet), Err(BadHeader::Kind(9)));
    }
}
