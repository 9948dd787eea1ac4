//! Everything that can go wrong forming or keeping a group of ranks, or
//! launching their processes.

/// A data-parallel failure. These reach the user of the CLI directly, so
/// every message says what happened and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A variable that sets a rank's place is set to something unusable.
    #[error("environment variable {var}={value:?} is not usable: {reason}")]
    Env {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },

    /// Rank 0 could not listen on the rendezvous address.
    #[error(
        "cannot listen on {addr} for the rendezvous: {source} — pick another port (BUMPGRAD_RENDEZVOUS, or \
         MASTER_PORT under torchrun) or stop whatever holds this one (an earlier run?)"
    )]
    Bind {
        /// The address, `host:port`.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },

    /// Not every rank joined within the rendezvous timeout.
    #[error(
        "the rendezvous at {addr} timed out after {waited_s:.1} s with {joined} of {world_size} ranks joined — \
         check that every rank was started with the same address and world size and that rank 0 is reachable \
         from the others"
    )]
    RendezvousTimeout {
        /// The address, `host:port`.
        addr: String,
        /// Seconds waited.
        waited_s: f64,
        /// Ranks that had joined.
        joined: usize,
        /// Ranks expected.
        world_size: usize,
    },

    /// A group that cannot be formed as configured (a world size mismatch,
    /// a duplicate rank), or a rank 0 that speaks another protocol. The
    /// text says which and what to change. (Strangers on rank 0's port are
    /// dropped, not errors.)
    #[error("the rendezvous failed: {0}")]
    Protocol(String),

    /// Rank 0 turned this rank away: it could not prove that it knows the
    /// job's token, or the two disagree on whether there is one.
    #[error(
        "rank 0 at {addr} did not admit this rank: {reason} — give every rank of the job the same \
         BUMPGRAD_RENDEZVOUS_TOKEN (or token file), or none to any of them"
    )]
    NotAdmitted {
        /// Rank 0's address.
        addr: String,
        /// Why, as rank 0 said it.
        reason: String,
    },

    /// A token file that cannot be read or holds no token.
    #[error("cannot use {path} as the rendezvous token: {reason}")]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },

    /// Rank 0 could not make NCCL's id for the group.
    #[error("rank 0 could not make the group's id: {0} — fix that on rank 0's host and restart every rank")]
    Payload(String),

    /// The network or the host failed between the ranks.
    #[error(
        "{what}: {source} — check the network between the ranks and this host's limits on open files and \
         processes, then start every rank again"
    )]
    Io {
        /// What was being done.
        what: String,
        /// What the system said.
        source: std::io::Error,
    },

    /// The launcher could not start a rank's process.
    #[error("cannot start a rank: {source} — check that the program exists and is executable")]
    Spawn {
        /// What the system said.
        source: std::io::Error,
    },

    /// A complete sentence naming the rank that was lost.
    #[error("{0}")]
    PeerLost(String),
}
