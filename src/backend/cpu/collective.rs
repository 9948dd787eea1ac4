//! An in-process data-parallel group: one thread per rank, each with its
//! own CPU arena, summing through shared host buffers. It runs the same
//! sharding, bucketing and loss arithmetic as a NCCL group, so the tests can
//! check data-parallel training against one device on a machine with no GPU.
//!
//! The sum is deterministic: every rank adds the ranks' values in rank
//! order, so all ranks hold bit-identical results, as NCCL's do.

use crate::backend::BackendError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One rank's handle on the group. Dropping it leaves the group: ranks
/// still waiting for it get an error instead of waiting forever.
pub struct LocalPeer {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    world: usize,
    /// Each rank's contribution to the sum in progress.
    slots: Vec<Mutex<Vec<f32>>>,
    state: Mutex<State>,
    changed: Condvar,
    /// The longest a rank waits for the others.
    timeout: Duration,
}

#[derive(Default)]
struct State {
    arrived: usize,
    generation: u64,
    /// The first rank that left the group.
    gone: Option<usize>,
}

/// A group of `world` ranks; hand one peer to each thread.
pub fn group(world: usize, timeout: Duration) -> Vec<LocalPeer> {
    let shared = Arc::new(Shared {
        world,
        slots: (0..world).map(|_| Mutex::new(Vec::new())).collect(),
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
        timeout,
    });
    (0..world)
        .map(|rank| LocalPeer {
            rank,
            shared: shared.clone(),
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LocalPeer {
    /// This peer's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The ranks in the group.
    pub fn world(&self) -> usize {
        self.shared.world
    }

    /// `data = Σ over ranks`, in rank order; every rank must call it with
    /// the same length.
    pub(crate) fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), BackendError> {
        {
            let mut slot = lock(&self.shared.slots[self.rank]);
            slot.clear();
            slot.extend_from_slice(data);
        }
        self.barrier()?;
        for (r, slot) in self.shared.slots.iter().enumerate() {
            let slot = lock(slot);
            if slot.len() != data.len() {
                return Err(BackendError::Group(format!(
                    "rank {} summed {} values where rank {r} summed {}: the ranks fell out of step",
                    self.rank,
                    data.len(),
                    slot.len()
                )));
            }
            if r == 0 {
                data.copy_from_slice(&slot);
            } else {
                data.iter_mut().zip(slot.iter()).for_each(|(d, v)| *d += v);
            }
        }
        // Nobody refills a slot before every rank has read them all.
        self.barrier()
    }

    /// Waits until every rank arrives, a rank leaves, or the timeout ends.
    fn barrier(&self) -> Result<(), BackendError> {
        let shared = &*self.shared;
        let mut state = lock(&shared.state);
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == shared.world {
            state.arrived = 0;
            state.generation += 1;
            shared.changed.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + shared.timeout;
        loop {
            if state.generation != generation {
                return Ok(());
            }
            if let Some(gone) = state.gone {
                return Err(BackendError::Group(format!(
                    "rank {gone} left the group while rank {} waited for it",
                    self.rank
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BackendError::Group(format!(
                    "rank {} waited {:.1} s for the other ranks of a sum",
                    self.rank,
                    shared.timeout.as_secs_f64()
                )));
            }
            state = shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for LocalPeer {
    fn drop(&mut self) {
        lock(&self.shared.state).gone.get_or_insert(self.rank);
        self.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_the_same_sum_in_rank_order() {
        // In f32, 1e8 + 1 rounds back to 1e8, so a sum of three values
        // depends on which two are added first. Each column gives 1 for
        // one pair added first and 0 for the other two: rank order,
        // (v0 + v1) + v2, sums the columns to [1, 0, 0]; adding v0 and v2
        // first gives [0, 0, 1], v1 and v2 first [0, 1, 0]. So a rank
        // summing in any order but rank order gets another result.
        let columns: [[f32; 3]; 3] = [[1e8, -1e8, 1.0], [1.0, 1e8, -1e8], [1e8, 1.0, -1e8]];
        let in_rank_order = [1.0, 0.0, 0.0];
        let in_other_orders = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]];
        for (c, column) in columns.iter().enumerate() {
            let sum = |a: usize, b: usize, c: usize| (column[a] + column[b]) + column[c];
            assert_eq!(sum(0, 1, 2), in_rank_order[c]);
            assert_eq!([sum(0, 2, 1), sum(1, 2, 0)], in_other_orders[c], "column {c}");
        }
        let peers = group(3, Duration::from_secs(60));
        let out: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = peers
                .into_iter()
                .map(|peer| {
                    s.spawn(move || {
                        let mut data: Vec<f32> = columns.iter().map(|c| c[peer.rank()]).collect();
                        peer.all_reduce_sum(&mut data).unwrap();
                        let first = data.clone();
                        // A second sum through the same slots: three
                        // copies of the first.
                        peer.all_reduce_sum(&mut data).unwrap();
                        (first, data)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
        .into_iter()
        .flat_map(|(first, second)| [first, second])
        .collect();
        for (rank, data) in out.chunks(2).enumerate() {
            assert_eq!(data[0], in_rank_order, "rank {rank}");
            assert_eq!(data[1], [3.0, 0.0, 0.0], "rank {rank}");
        }
    }

    #[test]
    fn a_rank_that_leaves_ends_the_others_wait() {
        let mut peers = group(2, Duration::from_secs(30));
        let second = peers.pop().unwrap();
        let first = peers.pop().unwrap();
        let started = Instant::now();
        let shared = first.shared.clone();
        let waiter = std::thread::spawn(move || first.all_reduce_sum(&mut [1.0]));
        // Rank 0 is waiting in the sum before rank 1 leaves.
        while lock(&shared.state).arrived == 0 {
            assert!(started.elapsed() < Duration::from_secs(20), "rank 0 never arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(second);
        let err = waiter.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("rank 1 left the group"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(25));
    }

    #[test]
    fn a_rank_that_never_comes_times_out() {
        let mut peers = group(2, Duration::from_millis(200));
        let first = peers.remove(0);
        let err = first.all_reduce_sum(&mut [1.0]).unwrap_err().to_string();
        assert!(err.contains("waited 0.2 s"), "{err}");
        drop(peers);
    }

    #[test]
    fn mismatched_lengths_are_refused_on_every_rank() {
        let peers = group(3, Duration::from_secs(60));
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = peers
                .into_iter()
                .map(|peer| {
                    s.spawn(move || {
                        // Ranks 0 and 1 agree; rank 2 sums one value more.
                        let mut data = vec![1.0; 2 + peer.rank() / 2];
                        peer.all_reduce_sum(&mut data).map(|()| data)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // No rank may go on with a sum of garbage, not even those that
        // agree with each other.
        for (rank, result) in results.into_iter().enumerate() {
            match result {
                Err(BackendError::Group(why)) => {
                    let expected = match rank {
                        2 => "rank 2 summed 3 values where rank 0 summed 2".to_string(),
                        _ => format!("rank {rank} summed 2 values where rank 2 summed 3"),
                    };
                    assert_eq!(why, format!("{expected}: the ranks fell out of step"));
                }
                other => panic!("rank {rank}: expected an error, got {other:?}"),
            }
        }
    }
}
