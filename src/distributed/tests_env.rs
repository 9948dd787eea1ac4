//! A rank's place from its environment, read through a lookup function.

use super::*;
use std::collections::HashMap;

const LONG: Duration = Duration::from_secs(60);

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| vars.get(name).cloned()
}

fn config(vars: &[(&str, &str)]) -> Option<RendezvousConfig> {
    RendezvousConfig::from_lookup(lookup(vars), LONG).unwrap_or_else(|e| panic!("{vars:?}: {e}"))
}

fn env_error(vars: &[(&str, &str)]) -> (String, String) {
    match RendezvousConfig::from_lookup(lookup(vars), LONG) {
        Err(DistError::Env { var, value, reason }) => (var, format!("{value} / {reason}")),
        other => panic!("{vars:?}: expected an Env error, got {other:?}"),
    }
}

fn source(launcher: Launcher, vars: &[&str]) -> Source {
    Source {
        launcher,
        vars: vars.iter().map(|v| v.to_string()).collect(),
    }
}

/// Slurm's variables for task `rank` of `ntasks` in a job step.
fn srun(rank: &'static str, ntasks: &'static str, local: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("SLURM_PROCID", rank),
        ("SLURM_NTASKS", ntasks),
        ("SLURM_LOCALID", local),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_JOB_NODELIST", "node[01-04],gpu7"),
    ]
}

#[test]
fn a_plain_run_is_not_a_group() {
    assert_eq!(config(&[]), None);
    let unrelated = [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "")];
    assert_eq!(config(&unrelated), None);
}

#[test]
fn torchrun_variables_are_understood() {
    let vars = [
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
    ];
    let cfg = config(&vars).unwrap();
    assert_eq!(
        cfg,
        RendezvousConfig {
            rank: 3,
            world_size: 4,
            addr: "node7:29500".into(),
            timeout: LONG,
            launched: false,
            local_rank: 1,
            token: None,
            source: source(
                Launcher::Variables,
                &[
                    "rank RANK",
                    "world size WORLD_SIZE",
                    "local rank LOCAL_RANK",
                    "address MASTER_ADDR and MASTER_PORT"
                ]
            ),
        }
    );
    assert_eq!(cfg.local_rank(), 1);

    let v6 = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "::1"),
        ("MASTER_PORT", "29500"),
    ];
    let cfg = config(&v6).unwrap();
    assert_eq!(cfg.addr, "[::1]:29500");
    assert_eq!(cfg.local_rank(), 0, "the rank when no local rank is given");
}

#[test]
fn bumpgrad_variables_win_over_torchrun_ones() {
    let vars = [
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "3"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
        ("BUMPGRAD_RANK", "1"),
        ("BUMPGRAD_WORLD_SIZE", "2"),
        ("BUMPGRAD_LOCAL_RANK", "0"),
        ("BUMPGRAD_RENDEZVOUS", "127.0.0.1:4000"),
        ("BUMPGRAD_LAUNCHED", "1"),
        ("BUMPGRAD_RENDEZVOUS_TIMEOUT", "2.5"),
        ("BUMPGRAD_RENDEZVOUS_TOKEN", " s3cret\n"),
    ];
    assert_eq!(
        config(&vars).unwrap(),
        RendezvousConfig {
            rank: 1,
            world_size: 2,
            addr: "127.0.0.1:4000".into(),
            timeout: Duration::from_millis(2500),
            launched: true,
            local_rank: 0,
            token: Token::new("s3cret"),
            source: source(
                Launcher::Variables,
                &[
                    "rank BUMPGRAD_RANK",
                    "world size BUMPGRAD_WORLD_SIZE",
                    "local rank BUMPGRAD_LOCAL_RANK",
                    "address BUMPGRAD_RENDEZVOUS"
                ]
            ),
        }
    );
}

#[test]
fn a_group_of_one_needs_no_address() {
    let cfg = config(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap();
    assert_eq!((cfg.rank, cfg.world_size, cfg.addr.as_str()), (0, 1, ""));
}

#[test]
fn a_rank_beyond_the_world_size_is_refused() {
    let (var, why) = env_error(&[
        ("RANK", "4"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert_eq!(var, "RANK");
    assert!(why.contains("from 0 to 3"), "{why}");
    let (var, _) = env_error(&[("BUMPGRAD_RANK", "2"), ("BUMPGRAD_WORLD_SIZE", "2")]);
    assert_eq!(var, "BUMPGRAD_RANK");
    let mut slurm = srun("2", "2", "0");
    slurm.push(("MASTER_PORT", "1"));
    let (var, why) = env_error(&slurm);
    assert_eq!(var, "SLURM_PROCID");
    assert!(why.contains("(from SLURM_NTASKS)"), "{why}");
}

#[test]
fn malformed_or_missing_values_are_env_errors() {
    let addr = [("BUMPGRAD_RENDEZVOUS", "127.0.0.1:4000")];
    let with_addr = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        addr.iter().chain(extra).copied().collect()
    };
    let slurm_with = |replace: (&'static str, &'static str)| -> Vec<(&'static str, &'static str)> {
        let mut vars: Vec<_> = srun("1", "2", "1")
            .into_iter()
            .filter(|(k, _)| *k != replace.0)
            .collect();
        vars.push(replace);
        vars
    };
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (with_addr(&[("RANK", "one"), ("WORLD_SIZE", "2")]), "RANK"),
        (with_addr(&[("RANK", "0"), ("WORLD_SIZE", "-2")]), "WORLD_SIZE"),
        (with_addr(&[("RANK", "0"), ("WORLD_SIZE", "0")]), "WORLD_SIZE"),
        (with_addr(&[("RANK", "0")]), "RANK"),
        (with_addr(&[("WORLD_SIZE", "2")]), "WORLD_SIZE"),
        (
            with_addr(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "x")]),
            "LOCAL_RANK",
        ),
        (
            with_addr(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_LAUNCHED", "yes")]),
            "BUMPGRAD_LAUNCHED",
        ),
        (
            with_addr(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("BUMPGRAD_RENDEZVOUS_TIMEOUT", "-1"),
            ]),
            "BUMPGRAD_RENDEZVOUS_TIMEOUT",
        ),
        (vec![("RANK", "0"), ("WORLD_SIZE", "2")], "BUMPGRAD_RENDEZVOUS"),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", "nohost")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", "h:0")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("BUMPGRAD_RENDEZVOUS", ":80")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
            "MASTER_ADDR",
        ),
        (
            vec![
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "http"),
            ],
            "MASTER_PORT",
        ),
        (vec![("OMPI_COMM_WORLD_RANK", "1")], "OMPI_COMM_WORLD_RANK"),
        (
            vec![("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")],
            "BUMPGRAD_RENDEZVOUS",
        ),
        (slurm_with(("SLURM_NTASKS", "two")), "SLURM_NTASKS"),
        (slurm_with(("SLURM_LOCALID", "-1")), "SLURM_LOCALID"),
        (slurm_with(("SLURM_JOB_ID", "job7")), "SLURM_JOB_ID"),
        (slurm_with(("SLURM_JOB_NODELIST", "node[01-")), "SLURM_JOB_NODELIST"),
        (slurm_with(("SLURM_JOB_ID", "")), "SLURM_JOB_ID"),
        (slurm_with(("MASTER_PORT", "0")), "MASTER_PORT"),
    ];
    for (vars, expected) in cases {
        let (var, why) = env_error(&vars);
        assert_eq!(var, expected, "{vars:?}: {why}");
    }
}

#[test]
fn env_errors_say_what_to_do() {
    let err = RendezvousConfig::from_lookup(lookup(&[("RANK", "0"), ("WORLD_SIZE", "2")]), LONG).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("BUMPGRAD_RENDEZVOUS=host:port"), "{text}");
}

// ---- cluster launchers ------------------------------------------------------

#[test]
fn an_srun_task_takes_its_place_and_address_from_slurm() {
    let cfg = config(&srun("3", "8", "1")).unwrap();
    assert_eq!(
        cfg,
        RendezvousConfig {
            rank: 3,
            world_size: 8,
            // 20000 + 123456 % 10000.
            addr: "node01:23456".into(),
            timeout: LONG,
            launched: false,
            local_rank: 1,
            token: None,
            source: source(
                Launcher::Slurm,
                &[
                    "rank SLURM_PROCID",
                    "world size SLURM_NTASKS",
                    "local rank SLURM_LOCALID",
                    "address SLURM_JOB_NODELIST (first host)",
                    "port from SLURM_JOB_ID"
                ]
            ),
        }
    );
    assert_eq!(
        cfg.source.to_string(),
        "Slurm (srun): rank SLURM_PROCID, world size SLURM_NTASKS, local rank SLURM_LOCALID, address \
         SLURM_JOB_NODELIST (first host), port from SLURM_JOB_ID"
    );
}

#[test]
fn explicit_variables_win_over_slurms() {
    let mut vars = srun("3", "8", "1");
    vars.extend([("LOCAL_RANK", "0"), ("MASTER_PORT", "29500")]);
    let cfg = config(&vars).unwrap();
    assert_eq!((cfg.rank, cfg.local_rank, cfg.addr.as_str()), (3, 0, "node01:29500"));
    assert_eq!(cfg.source.launcher, Launcher::Slurm);
    assert!(cfg.source.vars.contains(&"local rank LOCAL_RANK".to_string()));
    assert!(cfg.source.vars.contains(&"port MASTER_PORT".to_string()));

    vars.extend([("MASTER_ADDR", "10.1.2.3")]);
    assert_eq!(config(&vars).unwrap().addr, "10.1.2.3:29500");

    vars.extend([("RANK", "1"), ("WORLD_SIZE", "2")]);
    let cfg = config(&vars).unwrap();
    assert_eq!((cfg.rank, cfg.world_size), (1, 2));
    assert_eq!(cfg.source.launcher, Launcher::Variables);
}

#[test]
fn a_batch_script_or_a_task_alone_is_a_plain_run() {
    // sbatch -n 4 runs the script once, with SLURM_PROCID=0 and
    // SLURM_NTASKS=4 but no job step: not rank 0 of 4.
    let batch: Vec<_> = srun("0", "4", "0")
        .into_iter()
        .filter(|(k, _)| *k != "SLURM_STEP_ID")
        .collect();
    assert_eq!(config(&batch), None);
    assert_eq!(config(&srun("0", "1", "0")), None, "srun -n 1");
    let one_mpi = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")];
    assert_eq!(config(&one_mpi), None, "mpirun -np 1");
    // The old name of the step variable counts as well.
    let old_step: Vec<_> = batch.iter().copied().chain([("SLURM_STEPID", "2")]).collect();
    assert_eq!(config(&old_step).unwrap().world_size, 4);
}

#[test]
fn mpirun_ranks_are_understood_and_win_over_an_enclosing_slurm_job() {
    let plain = [
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("MASTER_ADDR", "head"),
        ("MASTER_PORT", "29400"),
    ];
    let cfg = config(&plain).unwrap();
    assert_eq!(
        (cfg.rank, cfg.world_size, cfg.local_rank, cfg.addr.as_str()),
        (5, 8, 1, "head:29400")
    );
    assert_eq!(
        cfg.source,
        source(
            Launcher::OpenMpi,
            &[
                "rank OMPI_COMM_WORLD_RANK",
                "world size OMPI_COMM_WORLD_SIZE",
                "local rank OMPI_COMM_WORLD_LOCAL_RANK",
                "address MASTER_ADDR and MASTER_PORT"
            ]
        )
    );
    // mpirun inside an sbatch script: the script's own Slurm variables
    // (task 0 of 1) are inherited by every rank; mpirun's decide, and the
    // job's node list gives the address.
    let in_slurm = [
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_JOB_NODELIST", "gpu[3-4]"),
    ];
    let cfg = config(&in_slurm).unwrap();
    assert_eq!(
        (cfg.rank, cfg.world_size, cfg.local_rank, cfg.addr.as_str()),
        (5, 8, 1, "gpu3:20007")
    );
    assert_eq!(cfg.source.launcher, Launcher::OpenMpi);
}

#[test]
fn the_first_host_of_a_slurm_node_list() {
    for (list, first) in [
        ("node[01-04],gpu7", Some("node01")),
        ("gpu7,node[01-04]", Some("gpu7")),
        ("node[1,3-5]", Some("node1")),
        ("node[07,01-03]", Some("node07")),
        ("rack[2-3]-n[009-011]", Some("rack2-n009")),
        ("n[009-011]-ib", Some("n009-ib")),
        ("login1", Some("login1")),
        ("10.0.0.5", Some("10.0.0.5")),
        (" node[1-2] ", Some("node1")),
        ("", None),
        ("node[01-04", None),
        ("node01-04]", None),
        ("node[a-b]", None),
        ("node[]", None),
        (",node1", None),
    ] {
        assert_eq!(first_slurm_host(list).as_deref(), first, "{list:?}");
    }
}

#[test]
fn the_slurm_port_is_the_same_for_every_task_and_in_its_range() {
    assert_eq!(slurm_port(123456), 23456);
    assert_eq!(slurm_port(0), SLURM_PORT_BASE);
    assert_eq!(slurm_port(9999), SLURM_PORT_BASE + SLURM_PORT_SPAN - 1);
    assert_eq!(slurm_port(u64::MAX), SLURM_PORT_BASE + (u64::MAX % 10000) as u16);
}

// ---- the token -----------------------------------------------------------

#[test]
fn the_token_comes_from_the_variable_or_a_file_that_agrees_with_it() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-env-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "from-file\n").unwrap();
    let none = lookup(&[]);
    let var = lookup(&[(TOKEN_VAR, "from-var")]);
    let same = lookup(&[(TOKEN_VAR, "from-file")]);
    assert_eq!(token_from(&none, None).unwrap(), None);
    assert_eq!(token_from(&var, None).unwrap(), Token::new("from-var"));
    assert_eq!(token_from(&none, Some(&file)).unwrap(), Token::new("from-file"));
    assert_eq!(token_from(&same, Some(&file)).unwrap(), Token::new("from-file"));
    let err = token_from(&var, Some(&file)).unwrap_err().to_string();
    assert!(
        err.contains("BUMPGRAD_RENDEZVOUS_TOKEN is set to another token"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
