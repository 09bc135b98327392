use super::*;

#[test]
fn every_stage_has_its_label() {
    let stopped = |keep_snapshot| Stage::Done(Finish::Stopped { keep_snapshot });
    let cases = [
        (Stage::Claimed, "claimed"),
        (Stage::Starting, "starting"),
        (Stage::Running, "running"),
        (Stage::Finishing(Finish::Suspended), "finishing"),
        (Stage::Finishing(Finish::Failed), "finishing"),
        (Stage::Done(Finish::Suspended), "suspended"),
        (Stage::Done(Finish::Terminated), "terminated"),
        (Stage::Done(Finish::Vanished), "vanished"),
        (Stage::Done(Finish::Failed), "failed"),
        (Stage::Done(Finish::Released), "released"),
        (stopped(true), "stopped"),
        (stopped(false), "stopped"),
    ];
    for (stage, text) in cases {
        assert_eq!(stage.label().as_str(), text, "{stage:?}");
        assert_eq!(stage.label().is_done(), stage.is_done(), "{stage:?}");
    }
}

#[test]
fn labels_are_listed_once_and_read_back() {
    for (i, label) in StageLabel::ALL.into_iter().enumerate() {
        assert_eq!(StageLabel::parse(label.as_str()), Some(label));
        assert_eq!(label.to_string(), label.as_str());
        assert_eq!(
            serde_json::to_value(label).unwrap(),
            serde_json::json!(label.as_str())
        );
        assert!(!StageLabel::ALL[..i].contains(&label), "{label} twice");
    }
    assert_eq!(StageLabel::parse("done"), None);
    assert_eq!(StageLabel::parse("Running"), None);
}

#[test]
fn only_done_labels_but_suspended_are_final() {
    let cases = [
        ("claimed", false, false),
        ("starting", false, false),
        ("running", false, false),
        ("finishing", false, false),
        ("suspended", false, true),
        ("terminated", true, true),
        ("vanished", true, true),
        ("failed", true, true),
        ("released", true, true),
        ("stopped", true, true),
    ];
    for (text, is_final, is_done) in cases {
        let label = StageLabel::parse(text).unwrap();
        assert_eq!(
            (label.is_final(), label.is_done()),
            (is_final, is_done),
            "{text}"
        );
    }
}
