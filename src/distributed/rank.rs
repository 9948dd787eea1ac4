//! Running one rank of a data-parallel run: it joins the others (the
//! rendezvous, which hands every rank NCCL's id), trains while a watch
//! thread ends the process as soon as another rank fails or the group
//! stops making progress, and says how it ended as an exit status. The
//! training itself is the caller's (a closure), so this layer knows no
//! training loop.

use super::launcher::{exit_now, INTERRUPTED};
use super::rendezvous::{rendezvous, RendezvousConfig, WatchOptions};
use super::{DistError, Join};
use crate::backend::Group;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// Exit status of a data-parallel process ended because another one failed
/// or the group stopped making progress.
pub const PEER_LOST: i32 = 3;

/// How a rank's run ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankEnd {
    /// Every epoch trained.
    Trained,
    /// A stop all ranks agreed on, after `step` of `epoch`: rank 0 wrote
    /// the checkpoint and reports the stop as its error; every other rank
    /// ends here.
    StoppedWithOthers {
        /// The epoch stopped in, from 1.
        epoch: usize,
        /// Steps of it done.
        step: usize,
    },
}

impl RankEnd {
    /// The process's exit status: 0, or a stopped run's (as a shell
    /// reports SIGINT).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Trained => 0,
            Self::StoppedWithOthers { .. } => INTERRUPTED as u8,
        }
    }
}

/// Why a rank failed: it could not join the others, or its training did.
#[derive(Debug)]
pub enum RankFailure {
    /// The rendezvous failed: the group never formed.
    Joining(DistError),
    /// Training failed once the group had formed.
    Training(crate::Error),
}

/// Joins the group `rv` describes, then calls `train` with how the rank's
/// device joins it and a step counter for the watch: a rank silent in
/// collectives for `stall_timeout` (or a peer gone) ends the process with
/// [`PEER_LOST`], after `last_words` has said why (on the watch thread,
/// while the training thread may be blocked in a collective that will never
/// complete: only ending the process ends that wait). `log` hears the
/// rendezvous.
pub fn run_rank(
    rv: &RendezvousConfig,
    stall_timeout: Duration,
    log: &mut dyn FnMut(&str),
    last_words: impl FnOnce(&str) + Send + 'static,
    train: impl FnOnce(Join, &AtomicU64) -> crate::Result<()>,
) -> Result<RankEnd, RankFailure> {
    let (rank, size) = (rv.rank, rv.world_size);
    let make_id = || crate::backend::cuda::unique_id().map_err(|e| e.to_string());
    let (id, links) = rendezvous(rv, make_id, log).map_err(RankFailure::Joining)?;
    let progress = Arc::new(AtomicU64::new(0));
    let options = WatchOptions {
        stall_timeout: Some(stall_timeout),
        launched: rv.launched,
        ..WatchOptions::default()
    };
    let watch = links.watch(progress.clone(), options, move |why| {
        last_words(&why);
        exit_now(PEER_LOST);
    });
    let join = Join {
        group: Group::Nccl { id, rank, world: size },
        ordinal: rv.local_rank(),
    };
    let result = train(join, &progress);
    match &result {
        // A clean end (or a stop all ranks agreed on) says goodbye; any other
        // error leaves without one, which tells the others to stop too.
        Ok(()) | Err(crate::Error::Interrupted { .. }) => watch.finish(),
        Err(_) => drop(watch),
    }
    match result {
        Ok(()) => Ok(RankEnd::Trained),
        // Rank 0 says where the checkpoint is; the others just follow.
        Err(crate::Error::Interrupted { epoch, step, .. }) if rank != 0 => {
            Ok(RankEnd::StoppedWithOthers { epoch, step })
        }
        Err(e) => Err(RankFailure::Training(e)),
    }
}
