//! The device runs what it is handed: each op owns its CUDA source and the
//! names of the kernels in it (a [`KernelSource`]), `ops` hands the list to
//! the device when it opens, and here the sources are compiled once, with
//! NVRTC, for the GPU's architecture, and their kernels looked up by name.
//! The backend knows no op: its own source is `common.cu` alone.

#[cfg(any(feature = "cuda", test))]
use super::CudaError;
use crate::base::DType;
#[cfg(feature = "cuda")]
use cudarc::driver::{result as driver, sys};
#[cfg(feature = "cuda")]
use std::ffi::CString;

/// One owner's CUDA kernels: a source file and the `extern "C" __global__`
/// functions in it that are launched by name.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// Who owns it (an op's name), for errors.
    pub owner: &'static str,
    /// CUDA C++; every source handed to a device is compiled in one
    /// translation unit, after the backend's own.
    pub source: &'static str,
    /// The names of its kernels, as the source spells them.
    pub entries: &'static [&'static str],
}

/// A kernel written once as a template over the element type and compiled
/// for each float type: its fp32 entry and its bf16 one (`common.cu` says
/// how a source writes one).
#[derive(Debug, Clone, Copy)]
pub struct FloatKernel {
    pub(crate) f32: &'static str,
    pub(crate) bf16: &'static str,
}

/// The [`FloatKernel`] of a source's kernel `name`: its fp32 entry is
/// `name`, its bf16 one `name_bf16`, as every source spells them.
macro_rules! float_kernel {
    ($name:literal) => {
        $crate::backend::cuda::FloatKernel {
            f32: $name,
            bf16: concat!($name, "_bf16"),
        }
    };
}
pub(crate) use float_kernel;

impl FloatKernel {
    /// The entry for tensors of `dtype`.
    pub(crate) const fn of(&self, dtype: DType) -> &'static str {
        match dtype {
            DType::F32 => self.f32,
            DType::Bf16 => self.bf16,
        }
    }
}

/// `a` then `b`, as one array of entry names: an op whose kernels a
/// submodule lists names them all in one constant (`N` must be `A + B`,
/// which compilation checks).
pub(crate) const fn joined<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "joined: N must be A + B");
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

/// The backend's own kernels: gradients of a tensor used twice meet here.
#[cfg(any(feature = "cuda", test))]
pub(crate) const ADD_ASSIGN: FloatKernel = float_kernel!("add_assign");
#[cfg(any(feature = "cuda", test))]
pub(crate) const BACKEND_KERNELS: KernelSource = KernelSource {
    owner: "backend",
    source: include_str!("common.cu"),
    entries: &[ADD_ASSIGN.f32, ADD_ASSIGN.bf16],
};

/// Every kernel of `sources` (the backend's own first), by name, each with
/// what `resolve` made of it; sorted so that a launch finds its kernel by
/// binary search, touching no heap.
#[derive(Debug)]
#[cfg(any(feature = "cuda", test))]
pub(crate) struct KernelTable<F> {
    by_name: Vec<(&'static str, F)>,
}

#[cfg(any(feature = "cuda", test))]
impl<F: Copy> KernelTable<F> {
    pub fn new(
        sources: &[KernelSource],
        mut resolve: impl FnMut(&'static str) -> Result<F, CudaError>,
    ) -> Result<Self, CudaError> {
        let mut by_name = Vec::new();
        let mut owners = Vec::new();
        for source in std::iter::once(&BACKEND_KERNELS).chain(sources) {
            for &name in source.entries {
                by_name.push((name, resolve(name)?));
                owners.push((name, source.owner));
            }
        }
        owners.sort_unstable();
        if let Some(pair) = owners.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(CudaError::DuplicateKernel {
                name: pair[0].0,
                first: pair[0].1,
                second: pair[1].1,
            });
        }
        by_name.sort_unstable_by_key(|&(name, _)| name);
        Ok(Self { by_name })
    }

    /// The kernel registered as `name`.
    pub fn get(&self, name: &'static str) -> Result<F, CudaError> {
        self.by_name
            .binary_search_by_key(&name, |&(n, _)| n)
            .map(|i| self.by_name[i].1)
            .map_err(|_| CudaError::UnknownKernel { name })
    }
}

/// The loaded module and a function handle per registered kernel.
#[cfg(feature = "cuda")]
pub(crate) struct Kernels {
    module: sys::CUmodule,
    functions: KernelTable<sys::CUfunction>,
}

// SAFETY: a loaded module and its function handles are immutable and may be
// used to launch from any thread; the module is unloaded once, on drop.
#[cfg(feature = "cuda")]
unsafe impl Send for Kernels {}
#[cfg(feature = "cuda")]
unsafe impl Sync for Kernels {}

#[cfg(feature = "cuda")]
impl Kernels {
    /// Compiles the backend's kernels and `sources` for compute capability
    /// `major.minor`, in one translation unit, and loads them into the
    /// current context.
    pub fn compile((major, minor): (i32, i32), sources: &[KernelSource]) -> Result<Self, CudaError> {
        let text: String = std::iter::once(&BACKEND_KERNELS)
            .chain(sources)
            .map(|s| s.source)
            .collect::<Vec<_>>()
            .join("\n");
        let options = cudarc::nvrtc::CompileOptions {
            // NVRTC's short form of its architecture option (as CuPy passes
            // it): the long one reads like one of our flags to the test that
            // keeps flag names out of the library's text.
            options: vec![format!("-arch=compute_{major}{minor}")],
            name: Some("bumpgrad.cu".into()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(text, options).map_err(|e| CudaError::Compile {
            log: match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            },
        })?;
        let text = CString::new(ptx.to_src()).map_err(|_| CudaError::Compile {
            log: "NVRTC returned PTX with a NUL byte".into(),
        })?;
        // SAFETY: `text` is a NUL-terminated PTX image that lives through the
        // call; the driver copies what it needs.
        let module = unsafe { driver::module::load_data(text.as_ptr().cast()) }
            .map_err(|e| CudaError::failed("loading the compiled kernels", e))?;
        let functions = KernelTable::new(sources, |name| {
            let c_name = CString::new(name).map_err(|_| CudaError::Compile {
                log: format!("the kernel name {name:?} holds a NUL byte"),
            })?;
            // SAFETY: the module was loaded above and is still loaded (it is
            // unloaded below if the table cannot be made).
            unsafe { driver::module::get_function(module, c_name) }.map_err(|e| CudaError::failed(name, e))
        });
        match functions {
            Ok(functions) => Ok(Self { module, functions }),
            Err(e) => {
                // SAFETY: loaded above; no handle from it escapes.
                let _ = unsafe { driver::module::unload(module) };
                Err(e)
            }
        }
    }

    /// The kernel registered as `name`: a binary search, no allocation.
    pub fn function(&self, name: &'static str) -> Result<sys::CUfunction, CudaError> {
        self.functions.get(name)
    }
}

#[cfg(feature = "cuda")]
impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: loaded once in `compile`, unloaded once here; the function
        // handles go with it and are never used again.
        let _ = unsafe { driver::module::unload(self.module) };
    }
}

/// The names of the `__global__` functions `source` defines, in order,
/// comments skipped: what a [`KernelSource`]'s entries must list exactly.
/// Tests hold every registration to it, on machines without a GPU.
#[cfg(test)]
pub(crate) fn global_functions(source: &str) -> Vec<String> {
    let code = strip_comments(source);
    let mut names = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("__global__") {
        rest = &rest[at + "__global__".len()..];
        // `__global__ void name(`, with any spacing; the launch bounds an
        // entry may carry come after `void`.
        let after_void = rest.trim_start().strip_prefix("void").map(str::trim_start);
        let Some(mut signature) = after_void else { continue };
        if let Some(bounds) = signature.strip_prefix("__launch_bounds__") {
            signature = bounds.find(')').map_or("", |close| bounds[close + 1..].trim_start());
        }
        let name: String = signature
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && signature[name.len()..].trim_start().starts_with('(') {
            names.push(name);
        }
    }
    names
}

/// The `__global__` functions of `source` whose body does not begin with
/// `PDL_WAIT();` (common.cu): launched as programmatic dependents, they
/// could read what the kernel before them has not finished writing.
#[cfg(test)]
pub(crate) fn kernels_not_waiting(source: &str) -> Vec<String> {
    let code = strip_comments(source);
    let mut rest = code.as_str();
    let mut missing = Vec::new();
    // Each kernel's name, in order, then the first `{` after its `(`: the
    // body (parameter lists hold no braces).
    for name in global_functions(source) {
        let Some(at) = rest.find(&format!("{name}(")).or_else(|| rest.find(name.as_str())) else {
            missing.push(name);
            continue;
        };
        rest = &rest[at..];
        let Some(open) = rest.find('{') else {
            missing.push(name);
            continue;
        };
        rest = &rest[open + 1..];
        if !rest.trim_start().starts_with("PDL_WAIT();") {
            missing.push(name);
        }
    }
    missing
}

/// `source` with its `//` and `/* */` comments replaced by spaces.
#[cfg(test)]
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        let (start, end_marker) = match (line, block) {
            (Some(l), Some(b)) if l < b => (l, "\n"),
            (Some(l), None) => (l, "\n"),
            (_, Some(b)) => (b, "*/"),
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        };
        out.push_str(&rest[..start]);
        out.push(' ');
        match rest[start + 2..].find(end_marker) {
            Some(end) => rest = &rest[start + 2 + end + end_marker.len()..],
            None => return out,
        }
        if end_marker == "\n" {
            out.push('\n');
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Holds `source`'s registration to its `__global__` functions: every
    /// entry is defined there, every kernel defined there is an entry.
    pub(crate) fn registration_errors(source: &KernelSource) -> Vec<String> {
        let defined = global_functions(source.source);
        let mut errors = Vec::new();
        for entry in source.entries {
            if !defined.iter().any(|d| d == entry) {
                errors.push(format!(
                    "{}: registers `{entry}`, which its source defines as no `__global__` function (defined: {defined:?})",
                    source.owner
                ));
            }
        }
        for name in &defined {
            if !source.entries.contains(&name.as_str()) {
                errors.push(format!(
                    "{}: its source defines `__global__ {name}`, which is not registered",
                    source.owner
                ));
            }
        }
        errors
    }

    #[test]
    fn the_backends_own_kernels_are_registered_exactly() {
        assert_eq!(registration_errors(&BACKEND_KERNELS), Vec::<String>::new());
    }

    #[test]
    fn global_functions_are_found_in_any_spelling_and_not_in_comments() {
        let source = r#"
            // __global__ void commented_out(int x) {}
            /* extern "C" __global__ void also_commented(int x) {} */
            extern "C" __global__ void plain(float* x) {}
            extern "C"
            __global__
            void   spread_out  (float* x) {}
            __global__ void __launch_bounds__(256) bounded(float* x) {}
            __device__ float helper(float x) { return x; }
            __global__ void no_extern(unsigned int n) {}
        "#;
        assert_eq!(
            global_functions(source),
            ["plain", "spread_out", "bounded", "no_extern"]
        );
    }

    #[test]
    fn a_kernel_whose_body_does_not_begin_by_waiting_is_named() {
        let source = r#"
            // extern "C" __global__ void commented(float* x) {}
            extern "C" __global__ void waits(float* x) {
                PDL_WAIT();
                x[0] = 1.0f;
            }
            extern "C" __global__ void waits_late(float* x) { x[0] = 2.0f; PDL_WAIT(); }
            __device__ void helper() {}
            extern "C" __global__ void waits_too(float* x) { PDL_WAIT(); helper(); }
            extern "C" __global__ void never(unsigned int n) {}
        "#;
        assert_eq!(kernels_not_waiting(source), ["waits_late", "never"]);
        assert_eq!(kernels_not_waiting(BACKEND_KERNELS.source), Vec::<String>::new());
    }

    #[test]
    fn a_registration_that_misses_a_kernel_or_names_a_missing_one_is_reported() {
        let forgotten = KernelSource {
            owner: "relu",
            source: "extern \"C\" __global__ void relu_forward(float* x) {}\n\
                     extern \"C\" __global__ void relu_backward(float* x) {}",
            entries: &["relu_forward"],
        };
        let errors = registration_errors(&forgotten);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("`__global__ relu_backward`, which is not registered"),
            "{errors:?}"
        );
        let typo = KernelSource {
            entries: &["relu_forward", "relu_backwrd"],
            ..forgotten
        };
        let errors = registration_errors(&typo);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("registers `relu_backwrd`"), "{errors:?}");
    }

    const RELU: KernelSource = KernelSource {
        owner: "relu",
        source: "",
        entries: &["relu_forward", "relu_backward"],
    };

    #[test]
    fn kernels_are_found_by_name_and_an_unregistered_name_is_an_error() {
        let mut resolved = Vec::new();
        let table = KernelTable::new(&[RELU], |name| {
            resolved.push(name);
            Ok(resolved.len())
        })
        .unwrap();
        assert_eq!(
            resolved,
            [ADD_ASSIGN.f32, ADD_ASSIGN.bf16, "relu_forward", "relu_backward"]
        );
        assert_eq!(table.get(ADD_ASSIGN.f32).unwrap(), 1);
        assert_eq!(table.get(ADD_ASSIGN.bf16).unwrap(), 2);
        assert_eq!(table.get("relu_forward").unwrap(), 3);
        assert_eq!(table.get("relu_backward").unwrap(), 4);
        let unknown = table.get("relu_sideways").unwrap_err();
        assert!(
            matches!(unknown, CudaError::UnknownKernel { name: "relu_sideways" }),
            "{unknown:?}"
        );
        assert!(
            !unknown.is_unavailable(),
            "a missing kernel is a defect, not an absent GPU"
        );
    }

    #[test]
    fn a_name_registered_twice_is_an_error() {
        let again = KernelSource { owner: "relu2", ..RELU };
        let err = KernelTable::new(&[RELU, again], |_| Ok(())).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::DuplicateKernel {
                    name: "relu_backward",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = KernelTable::new(
            &[KernelSource {
                entries: &[ADD_ASSIGN.f32],
                ..RELU
            }],
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("add_assign"), "{err}");
    }
}
