//! SHA-1 at compile time: each script's digest is computed from its text
//! by the compiler, so that no hash is typed by hand and an edit of a
//! script can never leave a stale one.

/// The SHA-1 digest of `data`.
pub(super) const fn digest(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    // The message, then 0x80, zeros, and its length in bits (64-bit big
    // endian), in blocks of 64 bytes.
    let bits = (data.len() as u64).wrapping_mul(8);
    let blocks = (data.len() + 8) / 64 + 1;
    let mut block = 0;
    while block < blocks {
        let mut w = [0u32; 80];
        let mut i = 0;
        while i < 16 {
            let mut word = 0u32;
            let mut j = 0;
            while j < 4 {
                let at = block * 64 + i * 4 + j;
                word = (word << 8) | padded(data, at, blocks, bits) as u32;
                j += 1;
            }
            w[i] = word;
            i += 1;
        }
        while i < 80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
            i += 1;
        }
        let (mut a, mut b, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        i = 0;
        while i < 80 {
            let (f, k) = match i / 20 {
                0 => ((b & c) | (!b & d), 0x5A82_7999),
                1 => (b ^ c ^ d, 0x6ED9_EBA1),
                2 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[i]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
            i += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        block += 1;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = (h[i / 4] >> (24 - 8 * (i % 4))) as u8;
        i += 1;
    }
    out
}

/// Byte `at` of the padded message of `blocks` blocks.
const fn padded(data: &[u8], at: usize, blocks: usize, bits: u64) -> u8 {
    let end = blocks * 64;
    if at < data.len() {
        data[at]
    } else if at == data.len() {
        0x80
    } else if at >= end - 8 {
        (bits >> (8 * (end - 1 - at))) as u8
    } else {
        0
    }
}

/// `digest` in lowercase hexadecimal, as `SCRIPT LOAD` returns it.
pub(super) const fn hex(digest: [u8; 20]) -> [u8; 40] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        out[2 * i] = DIGITS[(digest[i] >> 4) as usize];
        out[2 * i + 1] = DIGITS[(digest[i] & 0xf) as usize];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{digest, hex};

    fn sha1(text: &[u8]) -> String {
        String::from_utf8(hex(digest(text)).to_vec()).unwrap_or_default()
    }

    #[test]
    fn digests_match_the_standard_vectors() {
        assert_eq!(sha1(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            sha1(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            sha1(&[b'a'; 1_000_000]),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }

    #[test]
    fn lengths_around_a_block_boundary_pad_right() {
        // 55 bytes: the length fits in the last block; 56: it just does
        // not; 64: a whole block of message; 119 and 120 the same a block
        // later.
        let expected = [
            (55, "cef734ba81a024479e09eb5a75b6ddae62e6abf1"),
            (56, "901305367c259952f4e7af8323f480d59f81335b"),
            (63, "0ddc4e0cccd9a12850deb5abb0853a4425559fec"),
            (64, "bb2fa3ee7afb9f54c6dfb5d021f14b1ffe40c163"),
            (65, "78c741ddc482e4cdf8c474a0876347a0905b6233"),
            (119, "4300320394f7ee239bcdce7d3b8bcee173a0cd5c"),
            (120, "ceb2821639c4b6dcb10bce0e522ca2e608ce056d"),
        ];
        for (len, sha) in expected {
            assert_eq!(sha1(&vec![b'x'; len]), sha, "{len} bytes");
        }
    }
}
