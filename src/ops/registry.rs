//! The op registry: `registry!` turns one line per op into everything the
//! rest of the crate knows about ops.
//!
//! A line is the op's folder name and its roles, in this order:
//! - `backward`: it records a node for backward. Its module has a `Copy`
//!   type `Saved` with `fn backward(self, s: &mut Step<'_>) -> Result<()>`;
//!   the op records one with `s.record(saved)`.
//! - `recompute` (with `backward`): backward may make its output again
//!   rather than keep it. `Saved` also has `fn reads(&self) -> [Option<u32>;
//!   2]` and `fn recompute(self, s: &mut Step<'_>) -> Result<FloatBuf>`; the
//!   op registers one with `s.recomputable(&output, saved)`.
//! - `kernels`: it has CUDA kernels, its module's `KERNELS` (a
//!   `KernelSource`), which a GPU compiles when it opens.
//!
//! From the lines it makes the op modules (`pub mod <op>;`), [`KERNELS`]
//! (every op's sources, for `Device::open`), and the tape's node set: an
//! enum with one variant per `backward` op and one of recipes per
//! `recompute` op, `From` each op's `Saved`, and the
//! [`Recorded`](crate::autograd::Recorded) implementation through which
//! autograd runs backward and recomputation without naming an op.
//!
//! [`KERNELS`]: super::KERNELS
//!
//! One caution: rustfmt does not look inside macros, so it does not find
//! the op modules through `cargo fmt`; `.ci/run` formats them by path.

/// See the module's documentation. Lines are `op: role, role;`.
macro_rules! registry {
    ($($op:ident: $($role:ident),*;)*) => {
        $(pub mod $op;)*
        registry!(@sort [$($op: $($role),*;)*] [] [] []);
    };

    // Sorts each line into the ops recording a node, those with a recipe,
    // and those with kernels: one arm per allowed set of roles.
    (@sort [$op:ident: backward, recompute, kernels; $($rest:tt)*] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        registry!(@sort [$($rest)*] [$($b)* $op] [$($r)* $op] [$($k)* $op]);
    };
    (@sort [$op:ident: backward, recompute; $($rest:tt)*] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        registry!(@sort [$($rest)*] [$($b)* $op] [$($r)* $op] [$($k)*]);
    };
    (@sort [$op:ident: backward, kernels; $($rest:tt)*] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        registry!(@sort [$($rest)*] [$($b)* $op] [$($r)*] [$($k)* $op]);
    };
    (@sort [$op:ident: backward; $($rest:tt)*] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        registry!(@sort [$($rest)*] [$($b)* $op] [$($r)*] [$($k)*]);
    };
    (@sort [$op:ident: kernels; $($rest:tt)*] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        registry!(@sort [$($rest)*] [$($b)*] [$($r)*] [$($k)* $op]);
    };
    (@sort [$op:ident: $($role:ident),*; $($rest:tt)*] $($lists:tt)*) => {
        compile_error!(concat!(
            "ops registry line `", stringify!($op: $($role),*), "`: its roles are, in this order, ",
            "`backward`, `recompute` (only with `backward`) and `kernels`, each at most once"
        ));
    };

    (@sort [] [$($b:ident)*] [$($r:ident)*] [$($k:ident)*]) => {
        /// Every op's CUDA kernels, one entry per op with `kernels` in the
        /// registry: what a GPU compiles when it opens
        /// (`Device::open(request, threads, ops::KERNELS)`). An op's kernels
        /// are launched by the names registered in its `KERNELS`.
        pub const KERNELS: &[$crate::backend::KernelSource] = &[$($k::KERNELS),*];

        /// The tape's node set, made from the registry's lines. Its enums
        /// are public (a step's type names them) but live in this private
        /// module: nothing outside the crate can name one, and their
        /// payloads stay crate-private.
        mod tape {
            use $crate::autograd::Recorded;
            use $crate::memory::FloatBuf;
            use $crate::Result;

            /// One recorded op, with what its backward needs.
            #[derive(Clone, Copy, Debug)]
            #[allow(non_camel_case_types, private_interfaces)]
            pub enum Node {
                $($b(super::$b::Saved),)*
            }

            /// How backward makes a dropped tensor again, for the ops that
            /// can.
            #[derive(Clone, Copy, Debug)]
            #[allow(non_camel_case_types, private_interfaces)]
            pub enum Recipe {
                $($r(super::$r::Saved),)*
            }

            $(impl From<super::$b::Saved> for Node {
                fn from(saved: super::$b::Saved) -> Self {
                    Self::$b(saved)
                }
            })*

            $(impl From<super::$r::Saved> for Recipe {
                fn from(saved: super::$r::Saved) -> Self {
                    Self::$r(saved)
                }
            })*

            impl Recorded for Node {
                type Recipe = Recipe;

                fn backward(self, s: &mut super::Step<'_>) -> Result<()> {
                    match self {
                        $(Self::$b(saved) => saved.backward(s),)*
                    }
                }

                fn reads(recipe: &Recipe) -> [Option<u32>; 2] {
                    match *recipe {
                        $(Recipe::$r(saved) => saved.reads(),)*
                    }
                }

                fn recompute(recipe: Recipe, s: &mut super::Step<'_>) -> Result<FloatBuf> {
                    match recipe {
                        $(Recipe::$r(saved) => saved.recompute(s),)*
                    }
                }
            }
        }
    };
}
