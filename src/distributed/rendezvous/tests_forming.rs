//! Forming the group: every rank gets the payload, or every rank fails.

use super::*;
use std::sync::atomic::Ordering;

#[test]
fn every_rank_gets_rank_0s_payload() {
    let (listener, addr) = bound();
    let mut listener = Some(listener);
    let made = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 3, addr.clone(), LONG);
            let listener = if rank == 0 { listener.take() } else { None };
            let made = made.clone();
            thread::spawn(move || {
                let make = || {
                    made.fetch_add(1, Ordering::SeqCst);
                    Ok(id(rank as u8 * 50 + 1))
                };
                member(&cfg, listener, make, &mut quiet)
            })
        })
        .collect();
    for (rank, thread) in threads.into_iter().enumerate() {
        let (payload, links) = thread.join().unwrap().unwrap();
        assert_eq!(payload, id(1), "rank {rank} got rank 0's payload");
        assert_eq!((links.rank(), links.world_size()), (rank, 3));
        assert_eq!(links.peers.len(), if rank == 0 { 2 } else { 1 });
    }
    assert_eq!(made.load(Ordering::SeqCst), 1, "only rank 0 makes the payload, once");
}

#[test]
fn a_group_of_one_makes_its_payload_alone() {
    let cfg = RendezvousConfig::new(0, 1, "", LONG);
    let (payload, links) = rendezvous(&cfg, || Ok(id(9)), &mut quiet).unwrap();
    assert_eq!(payload, id(9));
    assert!(links.peers.is_empty());
}

#[test]
fn a_missing_rank_times_the_rendezvous_out_everywhere() {
    // Long enough for rank 1 to join on a loaded machine (90 ms at worst,
    // measured: see the top of this file): both must see 2.
    let timeout = Duration::from_secs(2);
    for (rank, (joined, took)) in rendezvous_all(&[(0, 3), (1, 3)], timeout).into_iter().enumerate() {
        assert!(took < timeout + PROMPT, "rank {rank} took {took:?}");
        match joined {
            Err(DistError::RendezvousTimeout {
                joined,
                world_size,
                waited_s,
                ..
            }) => {
                assert_eq!((joined, world_size), (2, 3), "rank {rank}");
                assert!(waited_s >= 1.9, "rank {rank} gave up after {waited_s} s");
            }
            other => panic!("rank {rank}: expected a timeout, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_timeout_message_says_what_to_check() {
    let (nobody, _held) = unreachable_addr();
    let cfg = RendezvousConfig::new(1, 2, nobody, Duration::from_millis(300));
    let start = Instant::now();
    let err = rendezvous(&cfg, || Ok(id(0)), &mut quiet).map(|_| ()).unwrap_err();
    assert!(start.elapsed() < PROMPT, "{:?}", start.elapsed());
    assert!(matches!(err, DistError::RendezvousTimeout { joined: 1, .. }), "{err:?}");
    let text = err.to_string();
    for needed in [
        "1 of 2 ranks joined",
        "same address and world size",
        "timed out after 0.",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from: {text}");
    }
    // The flag that waits longer is the CLI's to name (its hints).
    assert!(!text.contains("--"), "{text}");
}

#[test]
fn a_world_size_mismatch_fails_both_sides_at_once() {
    let results = rendezvous_all(&[(0, 3), (1, 2)], LONG);
    for (rank, (joined, took)) in results.into_iter().enumerate() {
        assert!(took < PROMPT, "rank {rank} took {took:?}");
        match joined {
            Err(DistError::Protocol(why)) => assert!(why.contains("world size of 2, rank 0 with 3"), "{why}"),
            other => panic!("rank {rank}: expected a protocol error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_duplicate_rank_fails_everyone_at_once() {
    let results = rendezvous_all(&[(0, 3), (1, 3), (1, 3)], LONG);
    for (i, (joined, took)) in results.into_iter().enumerate() {
        assert!(took < PROMPT, "member {i} took {took:?}");
        match joined {
            Err(DistError::Protocol(why)) => assert!(why.contains("two processes joined as rank 1"), "{why}"),
            other => panic!("member {i}: expected a protocol error, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_failed_payload_reaches_every_rank() {
    let (listener, addr) = bound();
    let mut listener = Some(listener);
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            let cfg = RendezvousConfig::new(rank, 2, addr.clone(), LONG);
            let listener = if rank == 0 { listener.take() } else { None };
            thread::spawn(move || {
                member(&cfg, listener, || Err("ncclGetUniqueId failed".into()), &mut quiet).map(|_| ())
            })
        })
        .collect();
    for thread in threads {
        let err = thread.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, DistError::Payload(why) if why == "ncclGetUniqueId failed"),
            "{err}"
        );
    }
}

#[test]
fn a_port_in_use_is_a_bind_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = RendezvousConfig::new(0, 2, taken.local_addr().unwrap().to_string(), LONG);
    let err = rendezvous(&cfg, || Ok(id(0)), &mut quiet).map(|_| ()).unwrap_err();
    assert!(matches!(err, DistError::Bind { .. }), "{err}");
}
