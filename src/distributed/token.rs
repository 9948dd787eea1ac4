//! The per-job secret that admits a process to a group.
//!
//! Rank 0 sends every connection a fresh random nonce; a rank proves that
//! it knows the job's token by answering with HMAC-SHA-256 (RFC 2104) of
//! the nonce, its rank and the world size, keyed by the token. The token
//! itself never crosses the network, a proof is good for one connection
//! only (the nonce), and it cannot be moved to another rank or group size.
//!
//! The cryptography is the RustCrypto crates' (`hmac` over the `sha2` the
//! checkpoints already use, `subtle` for the comparison) and the system's
//! random source is `getrandom`'s: code written for exactly this, reviewed
//! by many, rather than our own. RFC 4231's vectors below check that the
//! pieces are put together right.

use super::error::DistError;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Read;
use std::path::Path;

/// Bytes of a proof (one SHA-256 output).
pub(crate) const PROOF_LEN: usize = 32;
/// Bytes of the nonce rank 0 sends each connection.
pub(crate) const NONCE_LEN: usize = 32;
/// The environment variable that carries the token.
pub const TOKEN_VAR: &str = "BUMPGRAD_RENDEZVOUS_TOKEN";

/// A token file larger than this is not a token (a wrong path, most likely).
const MAX_FILE_BYTES: u64 = 4096;
/// Binds a proof to this use, so no other HMAC made with the same token
/// can stand in for one.
const DOMAIN: &[u8] = b"bumpgrad rendezvous hello v2";

/// A job's rendezvous secret. Its `Debug` form hides the value, so that a
/// configuration printed for a bug report does not leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(hidden)")
    }
}

impl Token {
    /// `None` for an empty (or all-blank) secret: no token at all rather
    /// than one anybody can guess. Surrounding whitespace is not part of it,
    /// so `echo secret > file` and `TOKEN=secret` give the same token.
    pub fn new(secret: &str) -> Option<Self> {
        let secret = secret.trim();
        (!secret.is_empty()).then(|| Self(secret.to_string()))
    }

    /// 32 random bytes from the system, written as 64 hex digits (what the
    /// launcher hands its ranks).
    pub fn generate() -> Result<Self, DistError> {
        let bytes: [u8; 32] = random_bytes()?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token in `path`: the file's text, surrounding whitespace removed.
    pub fn from_file(path: &Path) -> Result<Self, DistError> {
        let invalid = |reason: String| DistError::TokenFile {
            path: path.to_path_buf(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| invalid(format!("cannot open it ({e})")))?;
        let mut text = String::new();
        // One byte past the limit tells a file at the limit from a larger one.
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| invalid(format!("cannot read it as text ({e})")))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(invalid(format!(
                "it is larger than {MAX_FILE_BYTES} bytes; a token is one line, e.g. from `openssl rand -hex 32`"
            )));
        }
        Self::new(&text).ok_or_else(|| invalid("it is empty; put one line of secret text in it".into()))
    }

    /// The secret, to hand to a process this one starts.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// The proof that a rank knows this token, for `nonce` and its place.
    pub(crate) fn prove(&self, nonce: &[u8; NONCE_LEN], rank: u32, world_size: u32) -> [u8; PROOF_LEN] {
        hmac_sha256(
            self.0.as_bytes(),
            &[DOMAIN, nonce, &rank.to_le_bytes(), &world_size.to_le_bytes()],
        )
    }

    /// Whether `proof` is [`prove`](Self::prove)'s for these values. Takes
    /// the same time wherever the first differing byte is (`subtle`'s
    /// constant-time comparison), so that timing does not tell a forger how
    /// much of a guess was right.
    pub(crate) fn verify(&self, nonce: &[u8; NONCE_LEN], rank: u32, world_size: u32, proof: &[u8; PROOF_LEN]) -> bool {
        use subtle::ConstantTimeEq;
        let expected = self.prove(nonce, rank, world_size);
        expected.ct_eq(proof).into()
    }
}

/// HMAC-SHA-256 of the concatenation of `parts`, keyed by `key` (RFC 2104).
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    // HMAC takes a key of any length (a longer one than a block is hashed).
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts keys of every length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Rank 0's nonces: SHA-256 of a random seed and a counter, so each
/// connection gets a fresh one that nobody without the seed can predict,
/// without a read of the system's random source per connection (which a
/// flood of connections could make fail, for want of file descriptors).
pub(crate) struct Nonces {
    seed: [u8; 32],
    next: u64,
}

impl Nonces {
    pub(crate) fn new() -> Result<Self, DistError> {
        Ok(Self {
            seed: random_bytes()?,
            next: 0,
        })
    }

    pub(crate) fn next(&mut self) -> [u8; NONCE_LEN] {
        self.next += 1;
        let mut hash = Sha256::new();
        hash.update(self.seed);
        hash.update(self.next.to_le_bytes());
        hash.finalize().into()
    }
}

/// `N` bytes from the system's random source.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], DistError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| DistError::Io {
        what: "reading random bytes from the system for the rendezvous".into(),
        source: std::io::Error::other(e),
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6: a short key, a key shorter than the data,
        // and a key longer than a block (hashed first).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], &[b"Hi There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_proof_holds_for_its_nonce_rank_and_size_only() {
        let token = Token::new("s3cret").unwrap();
        let nonce = [7u8; NONCE_LEN];
        let proof = token.prove(&nonce, 1, 4);
        assert!(token.verify(&nonce, 1, 4, &proof));
        let mut other_nonce = nonce;
        other_nonce[31] ^= 1;
        assert!(
            !token.verify(&other_nonce, 1, 4, &proof),
            "replayed on another connection"
        );
        assert!(!token.verify(&nonce, 2, 4, &proof), "moved to another rank");
        assert!(!token.verify(&nonce, 1, 5, &proof), "moved to another group size");
        assert!(
            !Token::new("s3cres").unwrap().verify(&nonce, 1, 4, &proof),
            "another token"
        );
        let mut flipped = proof;
        flipped[0] ^= 0x80;
        assert!(!token.verify(&nonce, 1, 4, &flipped));
    }

    #[test]
    fn nonces_differ_per_connection_and_per_rank_0() {
        let mut a = Nonces::new().unwrap();
        let mut b = Nonces::new().unwrap();
        let from_a: Vec<_> = (0..100).map(|_| a.next()).collect();
        let mut unique = from_a.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 100);
        assert_ne!(b.next(), from_a[0], "another seed, other nonces");
    }

    #[test]
    fn tokens_are_trimmed_and_never_empty_or_printed() {
        assert_eq!(Token::new("  abc\n"), Token::new("abc"));
        assert_eq!(Token::new(" \n\t"), None);
        assert_eq!(format!("{:?}", Token::new("abc").unwrap()), "Token(hidden)");
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.secret().len(), 64);
        assert!(a.secret().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b, "each launch its own token");
    }

    #[test]
    fn token_files_are_read_and_bad_ones_refused() {
        let dir = std::env::temp_dir().join(format!("bumpgrad-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "0123abcd\n").unwrap();
        assert_eq!(Token::from_file(&good).unwrap(), Token::new("0123abcd").unwrap());
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let big = dir.join("big");
        std::fs::write(&big, vec![b'a'; MAX_FILE_BYTES as usize + 1]).unwrap();
        for (path, needed) in [
            (empty, "it is empty"),
            (big, "larger than 4096 bytes"),
            (dir.join("missing"), "cannot open it"),
        ] {
            let err = Token::from_file(&path).unwrap_err().to_string();
            assert!(err.contains(needed) && err.contains(path.to_str().unwrap()), "{err}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
