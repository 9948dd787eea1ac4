//! Times `backend::cpu::sgemm` against the `gemm` crate on the products our
//! models make, single-threaded, and counts the heap allocations of each.
//!
//! `cargo run --release --example sgemm_bench [FILTER]`: only the products
//! whose name contains FILTER, if given.

use bumpgrad::backend::cpu::sgemm::{gemm_nn, gemm_nt};
use std::hint::black_box;
use std::time::Instant;

#[path = "../tests/support/counting_alloc.rs"]
mod counting_alloc;

const CALLS: usize = 2000;
const REPEATS: usize = 5;

/// One product as the ops make it. `Nn`: A has strides (a_rs, a_cs) and B is
/// k×n row-major. `Nt`: A is m×k and B is n×k, both row-major.
#[derive(Clone, Copy)]
enum Kind {
    Nn { a_rs: usize, a_cs: usize },
    Nt,
}

struct Case {
    name: &'static str,
    m: usize,
    n: usize,
    k: usize,
    kind: Kind,
    accumulate: bool,
}

const CASES: [Case; 35] = [
    Case {
        name: "conv1 fwd        nn",
        m: 10,
        n: 576,
        k: 25,
        kind: Kind::Nn { a_rs: 25, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "conv2 fwd        nn",
        m: 20,
        n: 64,
        k: 250,
        kind: Kind::Nn { a_rs: 250, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "conv2 dx  (Wᵀ)   nn",
        m: 250,
        n: 64,
        k: 20,
        kind: Kind::Nn { a_rs: 1, a_cs: 250 },
        accumulate: false,
    },
    Case {
        name: "linear dx        nn",
        m: 100,
        n: 320,
        k: 50,
        kind: Kind::Nn { a_rs: 50, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "linear dW (dyᵀ)  nn",
        m: 50,
        n: 320,
        k: 100,
        kind: Kind::Nn { a_rs: 1, a_cs: 50 },
        accumulate: false,
    },
    Case {
        name: "conv1 dW         nt",
        m: 10,
        n: 25,
        k: 576,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "conv2 dW         nt",
        m: 20,
        n: 250,
        k: 64,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "linear1 fwd      nt",
        m: 100,
        n: 50,
        k: 320,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "linear2 fwd      nt",
        m: 100,
        n: 10,
        k: 50,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "tree leaf fwd    nt",
        m: 475,
        n: 450,
        k: 300,
        kind: Kind::Nt,
        accumulate: false,
    },
    Case {
        name: "tree level100 fwd nt",
        m: 100,
        n: 750,
        k: 300,
        kind: Kind::Nt,
        accumulate: false,
    },
    Case {
        name: "tree level100 fwd (Uᵀ) nn",
        m: 100,
        n: 750,
        k: 300,
        kind: Kind::Nn { a_rs: 300, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level32 fwd nt",
        m: 32,
        n: 750,
        k: 300,
        kind: Kind::Nt,
        accumulate: false,
    },
    Case {
        name: "tree level32 fwd (Uᵀ) nn",
        m: 32,
        n: 750,
        k: 300,
        kind: Kind::Nn { a_rs: 300, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level16 fwd nt",
        m: 16,
        n: 750,
        k: 300,
        kind: Kind::Nt,
        accumulate: false,
    },
    Case {
        name: "tree level16 fwd (Uᵀ) nn",
        m: 16,
        n: 750,
        k: 300,
        kind: Kind::Nn { a_rs: 300, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level8 fwd nt",
        m: 8,
        n: 750,
        k: 300,
        kind: Kind::Nt,
        accumulate: false,
    },
    Case {
        name: "tree level8 fwd (Uᵀ) nn",
        m: 8,
        n: 750,
        k: 300,
        kind: Kind::Nn { a_rs: 300, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level100 dx  nn",
        m: 100,
        n: 300,
        k: 750,
        kind: Kind::Nn { a_rs: 750, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level100 dW (dyᵀ) nn",
        m: 750,
        n: 300,
        k: 100,
        kind: Kind::Nn { a_rs: 1, a_cs: 750 },
        accumulate: true,
    },
    Case {
        name: "tree level8 dx   nn",
        m: 8,
        n: 300,
        k: 750,
        kind: Kind::Nn { a_rs: 750, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "tree level32 dW (dyᵀ) nn",
        m: 750,
        n: 300,
        k: 32,
        kind: Kind::Nn { a_rs: 1, a_cs: 750 },
        accumulate: true,
    },
    Case {
        name: "tree level8 dW (dyᵀ) nn",
        m: 750,
        n: 300,
        k: 8,
        kind: Kind::Nn { a_rs: 1, a_cs: 750 },
        accumulate: true,
    },
    Case {
        name: "r18/8 conv dW s1  nt",
        m: 8,
        n: 72,
        k: 784,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "r18/8 conv dW s2  nt",
        m: 16,
        n: 144,
        k: 196,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "r18/8 conv dW s3  nt",
        m: 32,
        n: 288,
        k: 49,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "r18/8 conv dW s4  nt",
        m: 64,
        n: 576,
        k: 16,
        kind: Kind::Nt,
        accumulate: true,
    },
    Case {
        name: "r18/8 conv fwd s1 nn",
        m: 8,
        n: 784,
        k: 72,
        kind: Kind::Nn { a_rs: 72, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv dx s1 (Wᵀ) nn",
        m: 72,
        n: 784,
        k: 8,
        kind: Kind::Nn { a_rs: 1, a_cs: 72 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv fwd s2 nn",
        m: 16,
        n: 196,
        k: 144,
        kind: Kind::Nn { a_rs: 144, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv dx s2 (Wᵀ) nn",
        m: 144,
        n: 196,
        k: 16,
        kind: Kind::Nn { a_rs: 1, a_cs: 144 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv fwd s3 nn",
        m: 32,
        n: 49,
        k: 288,
        kind: Kind::Nn { a_rs: 288, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv dx s3 (Wᵀ) nn",
        m: 288,
        n: 49,
        k: 32,
        kind: Kind::Nn { a_rs: 1, a_cs: 288 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv fwd s4 nn",
        m: 64,
        n: 16,
        k: 576,
        kind: Kind::Nn { a_rs: 576, a_cs: 1 },
        accumulate: false,
    },
    Case {
        name: "r18/8 conv dx s4 (Wᵀ) nn",
        m: 576,
        n: 16,
        k: 64,
        kind: Kind::Nn { a_rs: 1, a_cs: 576 },
        accumulate: false,
    },
];

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32 - 0.5)
        .collect()
}

fn ours(case: &Case, a: &[f32], b: &[f32], c: &mut [f32]) {
    let &Case {
        m, n, k, accumulate, ..
    } = case;
    match case.kind {
        Kind::Nn { a_rs, a_cs } => gemm_nn(m, n, k, a, a_rs, a_cs, b, n, c, accumulate),
        Kind::Nt => gemm_nt(m, n, k, a, k, b, k, c, accumulate),
    }
}

fn theirs(case: &Case, a: &[f32], b: &[f32], c: &mut [f32]) {
    let &Case {
        m, n, k, accumulate, ..
    } = case;
    let (a_rs, a_cs, b_rs, b_cs) = match case.kind {
        Kind::Nn { a_rs, a_cs } => (a_rs, a_cs, n, 1),
        // Bᵀ(p, j) = b[j·k + p].
        Kind::Nt => (k, 1, 1, k),
    };
    assert!(c.len() >= m * n && a.len() >= m * k && b.len() >= n * k);
    // SAFETY: the buffers were sized for these shapes and strides just
    // above; `c` is a unique borrow, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Times `ours` and `theirs` alternately, REPEATS rounds of CALLS calls
/// each, so that both see the same background load. Returns the median ns
/// per call of each and the heap allocations per call of each.
fn time_pair(mut ours: impl FnMut(), mut theirs: impl FnMut()) -> [(f64, f64); 2] {
    // Warm caches and any one-time detection.
    ours();
    theirs();
    // ns per call, [ours, theirs] for each round.
    let mut rounds = [[0.0; 2]; REPEATS];
    let mut allocs = [0; 2];
    for round in &mut rounds {
        for (which, f) in [&mut ours as &mut dyn FnMut(), &mut theirs].into_iter().enumerate() {
            let before = counting_alloc::allocations();
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            round[which] = start.elapsed().as_nanos() as f64 / CALLS as f64;
            allocs[which] += counting_alloc::allocations() - before;
        }
    }
    [0, 1].map(|which| {
        let mut t = rounds.map(|round| round[which]);
        t.sort_by(f64::total_cmp);
        (t[REPEATS / 2], allocs[which] as f64 / (CALLS * REPEATS) as f64)
    })
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    println!(
        "{:<20} {:>13} {:>9} {:>9} {:>7} {:>7} {:>12} {:>12}",
        "product", "m×n×k", "ours ns", "gemm ns", "gemm/us", "GFLOP/s", "ours allocs", "gemm allocs"
    );
    for case in CASES.iter().filter(|c| c.name.contains(&filter)) {
        let &Case { m, n, k, .. } = case;
        let a = data(m * k, 1);
        let b = data(k * n, 2);
        let mut c1 = data(m * n, 3);
        let mut c2 = c1.clone();
        let [(ns_ours, allocs_ours), (ns_gemm, allocs_gemm)] = time_pair(
            || ours(case, black_box(&a), black_box(&b), black_box(&mut c1)),
            || theirs(case, black_box(&a), black_box(&b), black_box(&mut c2)),
        );
        // Both ran the same number of times on the same data: the results
        // must agree (up to rounding order).
        let worst = c1
            .iter()
            .zip(&c2)
            .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-3, "{}: results differ by {worst}", case.name);
        println!(
            "{:<20} {:>13} {:>9.0} {:>9.0} {:>7.2} {:>7.1} {:>12.1} {:>12.1}",
            case.name,
            format!("{m}×{n}×{k}"),
            ns_ours,
            ns_gemm,
            ns_gemm / ns_ours,
            2.0 * (m * n * k) as f64 / ns_ours,
            allocs_ours,
            allocs_gemm
        );
    }
}
