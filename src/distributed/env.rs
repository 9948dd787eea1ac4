//! Where a process stands in a group, read from its environment: the
//! variables bumpgrad's launcher and torchrun set, or those of the cluster
//! launchers users already have (Open MPI's `mpirun`, Slurm's `srun`), and
//! the job's rendezvous token.
//!
//! Precedence, first match wins, so that what a user sets by hand beats
//! what a launcher set around it:
//! 1. `BUMPGRAD_RANK` / `BUMPGRAD_WORLD_SIZE`, else torchrun's `RANK` /
//!    `WORLD_SIZE` (each BUMPGRAD_ variable wins over its torchrun one);
//! 2. Open MPI: `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE` /
//!    `OMPI_COMM_WORLD_LOCAL_RANK` (before Slurm: `mpirun` inside a Slurm
//!    allocation inherits the batch script's `SLURM_PROCID`);
//! 3. Slurm, inside a job step (`SLURM_STEP_ID` set): `SLURM_PROCID` /
//!    `SLURM_NTASKS` / `SLURM_LOCALID`. A batch script has `SLURM_PROCID=0`
//!    and the allocation's `SLURM_NTASKS` too, but is one process, not a
//!    rank: without a step it is a plain run.
//!
//! The local rank is `BUMPGRAD_LOCAL_RANK` or `LOCAL_RANK` when set, else
//! the cluster launcher's, else the rank. The address is
//! `BUMPGRAD_RENDEZVOUS`, else `MASTER_ADDR` + `MASTER_PORT`; under a
//! cluster launcher in a Slurm job, a missing one of those two comes from
//! the job: the first host of `SLURM_JOB_NODELIST` (where Slurm starts task
//! 0, and `mpirun` its rank 0) and a port derived from `SLURM_JOB_ID`.
//! A cluster launcher's group of one is a plain run.

use super::error::DistError;
use super::rendezvous::{RendezvousConfig, DEFAULT_TIMEOUT};
use super::token::{Token, TOKEN_VAR};
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// Ports derived from a Slurm job id lie in `[SLURM_PORT_BASE,
/// SLURM_PORT_BASE + SLURM_PORT_SPAN)`: below Linux's ephemeral range
/// (32768 on), so no outgoing connection holds one by chance.
pub const SLURM_PORT_BASE: u16 = 20000;
/// How many ports job ids map onto, from [`SLURM_PORT_BASE`] up.
pub const SLURM_PORT_SPAN: u16 = 10000;

/// Who told this process its place in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// [`RendezvousConfig::new`]: the program itself.
    Program,
    /// BUMPGRAD_ variables (bumpgrad's launcher) or torchrun's.
    Variables,
    /// Open MPI's `mpirun` (its `OMPI_COMM_WORLD_*` variables).
    OpenMpi,
    /// Slurm's `srun`, inside a job step (its `SLURM_*` variables).
    Slurm,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Program => "the program",
            Self::Variables => "the BUMPGRAD_/torchrun variables",
            Self::OpenMpi => "Open MPI (mpirun)",
            Self::Slurm => "Slurm (srun)",
        })
    }
}

/// Where a configuration came from: the launcher, and each variable read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Who set the place.
    pub launcher: Launcher,
    /// What each part of the configuration was read from, e.g.
    /// `"rank SLURM_PROCID"`, `"address SLURM_JOB_NODELIST (first host)"`.
    pub vars: Vec<String>,
}

impl Source {
    /// A configuration the program made itself, reading nothing.
    pub const PROGRAM: Self = Self {
        launcher: Launcher::Program,
        vars: Vec::new(),
    };
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.launcher)?;
        if !self.vars.is_empty() {
            write!(f, ": {}", self.vars.join(", "))?;
        }
        Ok(())
    }
}

impl RendezvousConfig {
    /// Reads the process's environment (see the module's doc),
    /// BUMPGRAD_LAUNCHED=1, BUMPGRAD_RENDEZVOUS_TIMEOUT (seconds) and
    /// BUMPGRAD_RENDEZVOUS_TOKEN, with [`DEFAULT_TIMEOUT`]. `Ok(None)` for a
    /// plain single-process run.
    pub fn from_env() -> Result<Option<Self>, DistError> {
        Self::from_lookup(env_var, DEFAULT_TIMEOUT)
    }

    /// [`from_env`](Self::from_env) reading variables through `get`, so
    /// tests need not mutate the process environment. `timeout` applies
    /// unless BUMPGRAD_RENDEZVOUS_TIMEOUT is set (the launcher sets it to
    /// its own, so every rank it starts waits as long as it was told).
    ///
    /// An empty value counts as unset (`export RANK=` in a script).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, timeout: Duration) -> Result<Option<Self>, DistError> {
        let lookup = Lookup(&get);
        let Some(place) = lookup.place()? else {
            return Ok(None);
        };
        let mut vars = place.vars;
        let addr = match lookup.rendezvous_addr(place.launcher, &mut vars)? {
            Some(addr) => addr,
            None if place.world_size == 1 => String::new(),
            None => {
                return Err(DistError::Env {
                    var: "BUMPGRAD_RENDEZVOUS".into(),
                    value: String::new(),
                    reason: format!(
                        "a group of {} ranks needs rank 0's address: set BUMPGRAD_RENDEZVOUS=host:port \
                         (or MASTER_ADDR and MASTER_PORT)",
                        place.world_size
                    ),
                })
            }
        };
        let launched = match lookup.get("BUMPGRAD_LAUNCHED") {
            None => false,
            Some(v) if v.value.trim() == "1" => true,
            Some(v) if v.value.trim() == "0" => false,
            Some(v) => return Err(v.invalid("expected 1 (started by the launcher) or 0")),
        };
        let timeout = match lookup.get("BUMPGRAD_RENDEZVOUS_TIMEOUT") {
            None => timeout,
            Some(v) => v.seconds()?,
        };
        Ok(Some(Self {
            rank: place.rank,
            world_size: place.world_size,
            addr,
            timeout,
            launched,
            local_rank: place.local_rank,
            token: token_from(&get, None)?,
            source: Source {
                launcher: place.launcher,
                vars,
            },
        }))
    }
}

/// The process's variable `name`, lossily decoded.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// The job's token: BUMPGRAD_RENDEZVOUS_TOKEN (read through `get`) or the
/// contents of `file`. Both may be set (the launcher passes the variable
/// to ranks whose command line names the file) but must then agree.
pub fn token_from(get: impl Fn(&str) -> Option<String>, file: Option<&Path>) -> Result<Option<Token>, DistError> {
    let from_var = get(TOKEN_VAR).as_deref().and_then(Token::new);
    let Some(file) = file else { return Ok(from_var) };
    let from_file = Token::from_file(file)?;
    match from_var {
        Some(var) if var != from_file => Err(DistError::TokenFile {
            path: file.to_path_buf(),
            reason: format!("{TOKEN_VAR} is set to another token; set one of the two, or the same token in both"),
        }),
        _ => Ok(Some(from_file)),
    }
}

/// The first host of a Slurm node list such as `node[01-04,07],gpu7` or
/// `rack[1-2]-n[009-010]`: every bracket replaced by its first number,
/// zero padding kept. `None` when the list is not one Slurm writes.
pub fn first_slurm_host(list: &str) -> Option<String> {
    let mut depth = 0usize;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let mut rest = list[..end].trim();
    let mut host = String::new();
    while let Some(open) = rest.find('[') {
        host.push_str(&rest[..open]);
        let close = open + rest[open..].find(']')?;
        let first = rest[open + 1..close].split([',', '-']).next()?;
        if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        host.push_str(first);
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return None;
    }
    host.push_str(rest);
    (!host.is_empty()).then_some(host)
}

/// The rendezvous port every task of Slurm job `job_id` derives alike.
pub fn slurm_port(job_id: u64) -> u16 {
    SLURM_PORT_BASE + (job_id % u64::from(SLURM_PORT_SPAN)) as u16
}

/// Environment variables read through a caller's lookup function.
struct Lookup<'a, F>(&'a F);

/// One variable that is set, and its value.
struct Var {
    name: &'static str,
    value: String,
}

/// A rank's place, and what it was read from.
struct Place {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    launcher: Launcher,
    vars: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Lookup<'_, F> {
    fn get(&self, name: &'static str) -> Option<Var> {
        let value = (self.0)(name).filter(|v| !v.trim().is_empty())?;
        Some(Var { name, value })
    }

    /// The first of `names` that is set.
    fn first(&self, names: &[&'static str]) -> Option<Var> {
        names.iter().find_map(|name| self.get(name))
    }

    /// Rank, world size and local rank, by the precedence in the module's
    /// doc; `None` for a plain run.
    fn place(&self) -> Result<Option<Place>, DistError> {
        let explicit = (
            self.first(&["BUMPGRAD_RANK", "RANK"]),
            self.first(&["BUMPGRAD_WORLD_SIZE", "WORLD_SIZE"]),
        );
        let (rank, world, launcher) = match explicit {
            (Some(rank), Some(world)) => (rank, world, Launcher::Variables),
            (Some(rank), None) => {
                return Err(rank.invalid(
                    "the world size is not set: set BUMPGRAD_WORLD_SIZE (or WORLD_SIZE) too, or neither \
                     for a single-process run",
                ))
            }
            (None, Some(world)) => {
                return Err(world.invalid(
                    "the rank is not set: set BUMPGRAD_RANK (or RANK) too, or neither for a single-process run",
                ))
            }
            (None, None) => match self.cluster()? {
                Some(found) => found,
                None => return Ok(None),
            },
        };
        let world_size = world.count()?;
        if world_size == 0 {
            return Err(world.invalid("a group needs at least 1 rank"));
        }
        if world_size == 1 && launcher != Launcher::Variables {
            // `srun -n 1` or `mpirun -np 1`: one process, trained as such.
            return Ok(None);
        }
        let rank_n = rank.count()?;
        if rank_n >= world_size {
            return Err(rank.invalid(&format!(
                "ranks run from 0 to {} in a group of {world_size} (from {}); give every process a distinct \
                 rank below the world size",
                world_size - 1,
                world.name
            )));
        }
        let cluster_local = match launcher {
            Launcher::OpenMpi => Some("OMPI_COMM_WORLD_LOCAL_RANK"),
            Launcher::Slurm => Some("SLURM_LOCALID"),
            Launcher::Variables | Launcher::Program => None,
        };
        let mut names = vec!["BUMPGRAD_LOCAL_RANK", "LOCAL_RANK"];
        names.extend(cluster_local);
        let mut vars = vec![format!("rank {}", rank.name), format!("world size {}", world.name)];
        let local_rank = match self.first(&names) {
            Some(local) => {
                vars.push(format!("local rank {}", local.name));
                local.count()?
            }
            None => rank_n,
        };
        Ok(Some(Place {
            rank: rank_n,
            world_size,
            local_rank,
            launcher,
            vars,
        }))
    }

    /// Open MPI's or Slurm's rank and world size, if this process is one
    /// of theirs.
    fn cluster(&self) -> Result<Option<(Var, Var, Launcher)>, DistError> {
        match (self.get("OMPI_COMM_WORLD_RANK"), self.get("OMPI_COMM_WORLD_SIZE")) {
            (Some(rank), Some(world)) => return Ok(Some((rank, world, Launcher::OpenMpi))),
            (Some(var), None) | (None, Some(var)) => {
                return Err(var.invalid(
                    "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE come together from mpirun; one of them is \
                     missing: start the run with mpirun, or set BUMPGRAD_RANK and BUMPGRAD_WORLD_SIZE",
                ))
            }
            (None, None) => {}
        }
        if self.first(&["SLURM_STEP_ID", "SLURM_STEPID"]).is_none() {
            return Ok(None);
        }
        Ok(match (self.get("SLURM_PROCID"), self.get("SLURM_NTASKS")) {
            (Some(rank), Some(world)) => Some((rank, world, Launcher::Slurm)),
            _ => None,
        })
    }

    /// BUMPGRAD_RENDEZVOUS, else MASTER_ADDR:MASTER_PORT, either part from
    /// the Slurm job when a cluster launcher placed this rank; checked.
    fn rendezvous_addr(&self, launcher: Launcher, vars: &mut Vec<String>) -> Result<Option<String>, DistError> {
        if let Some(var) = self.get("BUMPGRAD_RENDEZVOUS") {
            let addr = var.value.trim();
            let port = addr
                .rsplit_once(':')
                .filter(|(host, _)| !host.is_empty())
                .map(|(_, port)| port);
            if !port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p != 0)) {
                return Err(var.invalid(
                    "expected host:port of rank 0's listener with a port from 1 to 65535, e.g. 10.0.0.1:29500",
                ));
            }
            vars.push("address BUMPGRAD_RENDEZVOUS".into());
            return Ok(Some(addr.to_string()));
        }
        let (host, port) = (self.get("MASTER_ADDR"), self.get("MASTER_PORT"));
        if let Some(port) = &port {
            if !port.value.trim().parse::<u16>().is_ok_and(|p| p != 0) {
                return Err(port.invalid("expected a port from 1 to 65535, e.g. 29500"));
            }
        }
        let slurm_job = matches!(launcher, Launcher::OpenMpi | Launcher::Slurm)
            .then(|| self.get("SLURM_JOB_NODELIST"))
            .flatten();
        let (host, port) = match (host, port, slurm_job) {
            (None, None, None) => return Ok(None),
            (Some(host), None, None) => {
                return Err(host.invalid("MASTER_PORT is not set: set it too (torchrun sets both)"))
            }
            (None, Some(port), None) => {
                return Err(port.invalid("MASTER_ADDR is not set: set it too (torchrun sets both)"))
            }
            (Some(host), Some(port), _) => {
                vars.push("address MASTER_ADDR and MASTER_PORT".into());
                (host.value.trim().to_string(), port.value.trim().to_string())
            }
            (host, port, Some(nodes)) => {
                let host = match host {
                    Some(host) => {
                        vars.push("address MASTER_ADDR".into());
                        host.value.trim().to_string()
                    }
                    None => {
                        vars.push("address SLURM_JOB_NODELIST (first host)".into());
                        first_slurm_host(&nodes.value).ok_or_else(|| {
                            nodes.invalid("not a Slurm node list; set MASTER_ADDR to rank 0's host instead")
                        })?
                    }
                };
                let port = match port {
                    Some(port) => {
                        vars.push("port MASTER_PORT".into());
                        port.value.trim().to_string()
                    }
                    None => {
                        let job = self.get("SLURM_JOB_ID").ok_or_else(|| DistError::Env {
                            var: "SLURM_JOB_ID".into(),
                            value: String::new(),
                            reason: "not set, so no port can be derived from it: set MASTER_PORT".into(),
                        })?;
                        let id =
                            job.value.trim().parse::<u64>().map_err(|_| {
                                job.invalid("expected a whole number (Slurm's job id); or set MASTER_PORT")
                            })?;
                        vars.push("port from SLURM_JOB_ID".into());
                        slurm_port(id).to_string()
                    }
                };
                (host, port)
            }
        };
        // A bare IPv6 address needs brackets before a port.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        Ok(Some(format!("{host}:{port}")))
    }
}

impl Var {
    fn invalid(&self, reason: &str) -> DistError {
        DistError::Env {
            var: self.name.to_string(),
            value: self.value.clone(),
            reason: reason.to_string(),
        }
    }

    fn count(&self) -> Result<usize, DistError> {
        self.value
            .trim()
            .parse()
            .map_err(|_| self.invalid("expected a whole number (0, 1, 2, ...)"))
    }

    fn seconds(&self) -> Result<Duration, DistError> {
        self.value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| self.invalid("expected a positive number of seconds, e.g. 300"))
    }
}

#[cfg(test)]
#[path = "tests_env.rs"]
mod tests;
