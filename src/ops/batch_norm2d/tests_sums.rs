//! The CPU's per-channel sums (`cpu.rs`) split the channels into groups by
//! the pool's threads and walk each group in memory order. Here the same
//! sums run on pools of 1, 2, 3 and 5 threads (groups of 64 and 6, 35, 24,
//! 14 channels): each channel must get its own values' sums, within f32
//! rounding of f64 sums taken the plain way, and the same bits on every
//! pool. (What this cannot see: a channel's f64 sum added in another order
//! differs by far less than the f32 results round away. Summing one
//! group's images in reverse passed it; reading another channel's planes
//! failed it.)

use super::cpu::{backward_sums, batch_stats, Mask, Stats};
use super::BatchNormArgs;

/// Channels (over `cpu.rs`'s 64 a group), images, and a plane longer than
/// a block of 256 that no vector of 8 divides.
const C: usize = 70;
const N: usize = 3;
const HW: usize = 300;

fn values(seed: u32, len: usize) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 * 4.0 - 1.5
        })
        .collect()
}

/// (mean, invstd, Σ g·x̂, Σ g) per channel, on a pool of `threads`.
fn sums(threads: usize, x: &[f32], gy: &[f32]) -> [Vec<f32>; 4] {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let (mut mean, mut invstd) = (vec![0.0; C], vec![0.0; C]);
        let (mut rm, mut rv) = (vec![0.0; C], vec![1.0; C]);
        let stats = Stats {
            mean: &mut mean,
            invstd: &mut invstd,
            running_mean: &mut rm,
            running_var: &mut rv,
        };
        batch_stats(C, HW, x, BatchNormArgs::train(), stats);
        let (mut dw, mut db) = (vec![0.0; C], vec![0.0; C]);
        backward_sums(C, HW, x, gy, &mean, &invstd, &Mask::All, &mut dw, &mut db);
        [mean, invstd, dw, db]
    })
}

#[test]
fn the_per_channel_sums_are_each_channels_own_and_the_same_bits_on_any_pool() {
    let (x, gy) = (values(7, N * C * HW), values(11, N * C * HW));
    let one = sums(1, &x, &gy);
    for threads in [2, 3, 5] {
        let other = sums(threads, &x, &gy);
        for (what, (a, b)) in ["mean", "invstd", "Σ g·x̂", "Σ g"].iter().zip(one.iter().zip(&other)) {
            let differ = a.iter().zip(b).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(
                differ, 0,
                "{what}: {differ} channels differ between 1 and {threads} threads"
            );
        }
    }
    let [mean, invstd, dw, db] = one;
    for ch in 0..C {
        let plane = |img: usize| &x[(img * C + ch) * HW..][..HW];
        let grad = |img: usize| &gy[(img * C + ch) * HW..][..HW];
        let count = (N * HW) as f64;
        let mu = (0..N).flat_map(|i| plane(i).iter()).map(|&v| v as f64).sum::<f64>() / count;
        let var = (0..N)
            .flat_map(|i| plane(i).iter())
            .map(|&v| (v as f64 - mu).powi(2))
            .sum::<f64>()
            / count;
        let is = 1.0 / (var + 1e-5).sqrt();
        let (mut gx, mut g) = (0.0f64, 0.0f64);
        for i in 0..N {
            for (&v, &d) in plane(i).iter().zip(grad(i)) {
                gx += d as f64 * (v as f64 - mu) * is;
                g += d as f64;
            }
        }
        let near = |got: f32, want: f64, scale: f64| (got as f64 - want).abs() <= 1e-5 * scale.max(1.0);
        assert!(near(mean[ch], mu, 1.0), "channel {ch}: mean {} against {mu}", mean[ch]);
        assert!(
            near(invstd[ch], is, is),
            "channel {ch}: invstd {} against {is}",
            invstd[ch]
        );
        assert!(near(dw[ch], gx, count), "channel {ch}: Σ g·x̂ {} against {gx}", dw[ch]);
        assert!(near(db[ch], g, count), "channel {ch}: Σ g {} against {g}", db[ch]);
    }
}
