//! The command line and the spawn contract's required variables.

use crate::common;

use common::run;

const URL: &str = "DEVIN_OUTPOST_GATEWAY_URL";
const TOKEN: &str = "DEVIN_OUTPOST_CONNECT_TOKEN";
const SESSION: &str = "DEVIN_OUTPOST_SESSION_ID";

fn full_env() -> Vec<(&'static str, &'static str)> {
    vec![
        // Port 9 (discard) on loopback: never reached, the tests below stop
        // before dialing.
        (URL, "ws://127.0.0.1:9/gateway"),
        (TOKEN, "cli-test-token"),
        (SESSION, "devin-cli"),
    ]
}

#[tokio::test]
async fn exits_2_naming_each_missing_variable() {
    for missing in [URL, TOKEN, SESSION] {
        let env: Vec<_> = full_env()
            .into_iter()
            .filter(|(name, _)| *name != missing)
            .collect();
        let (code, _, stderr) = run(&["serve"], &env).await;
        assert_eq!(code, 2, "without {missing}: {stderr}");
        assert!(stderr.contains(missing), "without {missing}: {stderr}");
        for present in [URL, TOKEN, SESSION].iter().filter(|n| **n != missing) {
            assert!(
                !stderr.contains(&format!("variable(s): {present}")),
                "{present} is set but reported missing: {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn exits_2_naming_all_when_none_is_set() {
    let (code, _, stderr) = run(&["serve"], &[]).await;
    assert_eq!(code, 2);
    for name in [URL, TOKEN, SESSION] {
        assert!(stderr.contains(name), "{stderr}");
    }
}

#[tokio::test]
async fn empty_counts_as_missing() {
    let mut env = full_env();
    env[1] = (TOKEN, "");
    let (code, _, stderr) = run(&["serve"], &env).await;
    assert_eq!(code, 2);
    assert!(stderr.contains(TOKEN), "{stderr}");
}

#[tokio::test]
async fn refuses_tls_urls_without_leaking_the_token() {
    let mut env = full_env();
    env[0] = (URL, "wss://127.0.0.1:9/gateway");
    let (code, _, stderr) = run(&["serve"], &env).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("ws://"), "{stderr}");
    assert!(!stderr.contains("cli-test-token"), "{stderr}");
}

#[tokio::test]
async fn unknown_arguments_print_usage_and_exit_2() {
    for args in [&[][..], &["run"][..], &["serve", "extra"][..]] {
        let (code, _, stderr) = run(args, &full_env()).await;
        assert_eq!(code, 2, "{args:?}");
        assert!(stderr.contains("usage:"), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn prints_its_version() {
    let (code, stdout, _) = run(&["--version"], &[]).await;
    assert_eq!(code, 0);
    assert!(stdout.starts_with("devin-remote-sim "), "{stdout}");
}
