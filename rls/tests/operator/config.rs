//! The configuration format of flowguard-rls: the example files parse, descriptors match as the
//! reference service matches them, and bad files are refused with the file, the path inside and
//! what to change.

use std::path::{Path, PathBuf};

use flowguard_rls::config::{ConfigSet, Limit, LimitRule, Lookup, Rate, Unit, parse_domain};
use flowguard_rls::source::ConfigSource;

fn examples() -> ConfigSet {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    ConfigSource::new(vec![dir])
        .read()
        .expect("the example files are readable")
        .parse()
        .expect("the example files are valid")
}

fn rule<'a>(
    set: &'a ConfigSet,
    domain: &str,
    entries: &[(&'static str, &'static str)],
) -> &'a LimitRule {
    match set.lookup(domain, entries.iter().copied()) {
        Lookup::Rule(rule) => rule,
        other => panic!("{domain} {entries:?}: expected a rule, got {other:?}"),
    }
}

fn rate(set: &ConfigSet, domain: &str, entries: &[(&'static str, &'static str)]) -> Rate {
    match rule(set, domain, entries).limit {
        Limit::Rate(rate) => rate,
        Limit::Unlimited => panic!("{domain} {entries:?} is unlimited"),
    }
}

#[test]
fn every_example_file_loads() {
    let set = examples();
    let mut domains: Vec<_> = set.domains().map(|d| d.domain().to_string()).collect();
    domains.sort();
    assert_eq!(domains, ["api_gateway", "messaging", "tenants"]);
    assert_eq!(set.rule_count(), 11);
}

#[test]
fn a_value_entry_beats_a_wildcard_which_beats_a_key_only_entry() {
    let set = examples();
    let search = rate(&set, "api_gateway", &[("path", "/v1/search")]);
    assert_eq!(search.requests_per_unit, 10);
    let other = rate(&set, "api_gateway", &[("path", "/v1/orders")]);
    assert_eq!(other.requests_per_unit, 50);
    assert_eq!(
        rule(&set, "api_gateway", &[("caller", "internal-billing")]).limit,
        Limit::Unlimited
    );
    assert_eq!(
        set.lookup("api_gateway", [("caller", "partner")]),
        Lookup::NoRule
    );
}

#[test]
fn rates_carry_unit_burst_and_name() {
    let set = examples();
    let per_client = rule(&set, "api_gateway", &[("remote_address", "10.0.0.1")]);
    assert_eq!(per_client.name.as_deref(), Some("per_client"));
    assert_eq!(
        per_client.limit,
        Limit::Rate(Rate {
            requests_per_unit: 100,
            unit: Unit::Minute,
            burst: Some(20)
        })
    );
    assert_eq!(per_client.stat_path, "remote_address");
}

#[test]
fn nested_descriptors_match_entry_by_entry_and_only_at_the_last_entry() {
    let set = examples();
    let free = rate(&set, "tenants", &[("tenant", "acme"), ("plan", "free")]);
    assert_eq!((free.requests_per_unit, free.unit), (1000, Unit::Hour));
    let trial = rule(&set, "tenants", &[("tenant", "acme"), ("plan", "trial")]);
    assert!(trial.shadow_mode);
    assert_eq!(trial.stat_path, "tenant.plan");
    assert!(rule(&set, "tenants", &[("tenant", "acme"), ("plan", "pro")]).detailed_metric);
    // The tenant level itself has no limit; deeper or shallower requests match nothing.
    assert_eq!(set.lookup("tenants", [("tenant", "acme")]), Lookup::NoRule);
    assert_eq!(
        set.lookup(
            "tenants",
            [("tenant", "acme"), ("plan", "free"), ("x", "y")]
        ),
        Lookup::NoRule
    );
    // A limit on a parent and on its child: each applies to its own depth.
    assert_eq!(
        rate(&set, "messaging", &[("message_type", "sms")]).requests_per_unit,
        600
    );
    let sender = rule(
        &set,
        "messaging",
        &[("message_type", "sms"), ("sender", "alice")],
    );
    assert_eq!(sender.stat_path, "message_type_sms.sender");
    assert_eq!(
        set.lookup("messaging", [("message_type", "marketing")]),
        Lookup::NoRule
    );
}

#[test]
fn an_unknown_domain_is_told_apart_from_an_unmatched_descriptor() {
    let set = examples();
    assert_eq!(set.lookup("nope", [("path", "/")]), Lookup::UnknownDomain);
    assert!(!set.has_domain("nope"));
}

/// (file text, path the error must name, words the error must contain)
const BAD: &[(&str, &str, &str)] = &[
    (
        "descriptors: []\n",
        "domain",
        "every file must name its domain",
    ),
    ("domain: ''\n", "domain", "empty"),
    (
        "domain: d\ndescriptors:\n  - value: v\n",
        "descriptors[0].key",
        "non-empty `key`",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
        "descriptors[0].rate_limit.unit",
        "missing `unit`",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        "descriptors[0].rate_limit.unit",
        "use second, minute, hour, day, week, month or year",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
        "descriptors[0].rate_limit.requests_per_unit",
        "missing `requests_per_unit`",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        "descriptors[0].rate_limit.requests_per_unit",
        "use at least 1",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 0}\n",
        "descriptors[0].rate_limit.burst",
        "at least 1",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
        "descriptors[0].rate_limit",
        "takes no `unit`",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: a\n        value: b\n      - key: a\n        value: b\n",
        "descriptors[0].descriptors[1]",
        "appears twice",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    value: exact\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        "descriptors[0].share_threshold",
        "wildcard value",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
        "descriptors[0].rate_limit.replaces[0].name",
        "non-empty `name`",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: y}, {name: x}]}\n",
        "descriptors[0].rate_limit.replaces[1].name",
        "replaces itself",
    ),
];

#[test]
fn the_units_are_the_reference_services_and_replaces_names_rules() {
    let text = "domain: d\ndescriptors:
  - key: w
    rate_limit: { unit: week, requests_per_unit: 7 }
  - key: m
    rate_limit: { unit: Month, requests_per_unit: 30 }
  - key: y
    rate_limit: { name: yearly, unit: YEAR, requests_per_unit: 365, replaces: [{ name: w }] }
";
    let set = ConfigSet::new(vec![parse_domain(Path::new("d.yaml"), text).unwrap()]).unwrap();
    let day = 86_400;
    for (key, unit, secs) in [
        ("w", Unit::Week, 7 * day),
        ("m", Unit::Month, 30 * day),
        ("y", Unit::Year, 365 * day),
    ] {
        let rate = rate(&set, "d", &[(key, "v")]);
        assert_eq!(rate.unit, unit);
        assert_eq!(rate.unit.period().as_secs(), secs);
    }
    assert_eq!(rule(&set, "d", &[("y", "v")]).replaces, ["w"]);
}

#[test]
fn bad_files_are_refused_with_file_path_and_what_to_change() {
    let file = PathBuf::from("conf/bad.yaml");
    for (text, path, words) in BAD {
        let error = parse_domain(&file, text).expect_err(text);
        assert_eq!(error.location.file, file, "{text}");
        assert_eq!(error.location.path, *path, "{text}");
        let message = error.to_string();
        assert!(message.starts_with("conf/bad.yaml: at "), "{message}");
        assert!(message.contains(words), "{text}: {message}");
    }
}

#[test]
fn yaml_and_type_errors_name_the_path_and_line() {
    let file = PathBuf::from("x.yaml");
    let typo = "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n";
    let message = parse_domain(&file, typo).unwrap_err().to_string();
    assert!(
        message.contains("descriptors[0]: unknown field `rate_limt`"),
        "{message}"
    );
    assert!(message.contains("line 4"), "{message}");
    let negative = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -3}\n";
    let message = parse_domain(&file, negative).unwrap_err().to_string();
    assert!(
        message.contains("descriptors[0].rate_limit.requests_per_unit"),
        "{message}"
    );
}

#[test]
fn one_domain_in_two_files_is_refused_naming_both() {
    let a = parse_domain(Path::new("a.yaml"), "domain: d\n").unwrap();
    let b = parse_domain(Path::new("b.yaml"), "domain: d\n").unwrap();
    let message = ConfigSet::new(vec![a, b]).unwrap_err().to_string();
    assert!(message.starts_with("b.yaml: at domain"), "{message}");
    assert!(message.contains("a.yaml"), "{message}");
}
