//! The shared configuration read from variables: every error names the variable.

use resq::config::*;
use resq_testing::{REQUIRED_VARS as REQUIRED, vars};

#[test]
fn missing_required_names_the_variable() {
    for (i, (name, _)) in REQUIRED.iter().enumerate() {
        let mut v = REQUIRED.to_vec();
        v.remove(i);
        let err = CommonConfig::from_vars(&vars(&v)).unwrap_err();
        assert!(
            matches!(err, ConfigError::Missing { var, .. } if var == *name),
            "{err}"
        );
        assert!(err.to_string().starts_with(&format!("{name} is not set; ")));
        // empty counts as unset
        v.insert(i, (name, "  "));
        assert!(matches!(
            CommonConfig::from_vars(&vars(&v)),
            Err(ConfigError::Missing { .. })
        ));
    }
}

#[test]
fn invalid_values_name_the_variable() {
    for (var, value) in [
        ("MAX_REDRIVE_ATTEMPTS", "0"),
        ("MAX_REDRIVE_ATTEMPTS", "three"),
        ("MAX_REDRIVE_ATTEMPTS", "-1"),
        ("DEADLINE_MARGIN_MS", "soon"),
        ("DEADLINE_MARGIN_MS", "0"),
        ("DEADLINE_MARGIN_MS", "199"),
        ("DLQ_URL", "orders-dlq"),
    ] {
        let mut v = REQUIRED.to_vec();
        v.retain(|(k, _)| *k != var);
        v.push((var, value));
        let err = CommonConfig::from_vars(&vars(&v)).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { var: got, .. } if *got == var),
            "{var}={value}: {err}"
        );
        assert!(err.to_string().starts_with(var), "{err}");
    }
    let err = CommonConfig::from_vars(&vars(&REQUIRED[1..]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "MAIN_QUEUE_URL is not set; resq needs the URL of the main queue"
    );
}

#[test]
fn a_list_of_names_drops_blanks() {
    let v = vars(&[("PAUSE_ON_ALARMS", " replays-failing , ,dlq-depth")]);
    assert_eq!(v.names("PAUSE_ON_ALARMS"), ["replays-failing", "dlq-depth"]);
    assert!(v.names("UNSET").is_empty());
}

#[test]
fn outside_lambda_the_runtime_variables_are_named() {
    let lambda = [
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
        ("AWS_LAMBDA_FUNCTION_NAME", "consumer"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
    ];
    assert_eq!(lambda_environment(&vars(&lambda)), Ok(()));
    let err = lambda_environment(&vars(&lambda[1..])).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("AWS_LAMBDA_RUNTIME_API is not set; Lambda sets it; to run the function on this machine use `cargo lambda watch`"),
        "{err}"
    );
    let mut odd = lambda.to_vec();
    odd[3] = ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "lots");
    assert!(matches!(
        lambda_environment(&vars(&odd)),
        Err(ConfigError::Invalid {
            var: "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            ..
        })
    ));
}
