//! `POST /json`: `ShouldRateLimit` for clients that cannot speak gRPC (a Lua filter, a script),
//! as envoyproxy/ratelimit's `/json` endpoint: the request and the answer are the protobuf
//! messages in their canonical JSON form (proto3 JSON mapping).
//!
//! ```text
//! curl -s -XPOST localhost:6070/json \
//!   -d '{"domain": "shop", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}'
//! {"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":60,"unit":"MINUTE"},"limitRemaining":59,"durationUntilReset":"1s"}]}
//! ```
//!
//! Field names are accepted in `lowerCamelCase` or as in the `.proto` (`hits_addend`); as in the
//! mapping, fields with their default value are left out of the answer, 64-bit integers may be
//! numbers or strings, and durations are strings of seconds (`"1.500s"`). The HTTP status is
//! `200` for `OK`, `429` for `OVER_LIMIT`, `400` for a request that cannot be read or is
//! refused (`INVALID_ARGUMENT`), `503` when the store failed.

use axum::http::StatusCode;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<U64>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(default, alias = "requests_per_unit", rename = "requestsPerUnit")]
    requests_per_unit: u32,
    #[serde(default)]
    unit: String,
}

/// A `uint64` in the JSON mapping: a number or a decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum U64 {
    Number(u64),
    Text(String),
}

impl U64 {
    fn value(&self) -> Result<u64, String> {
        match self {
            U64::Number(n) => Ok(*n),
            U64::Text(t) => t
                .parse()
                .map_err(|_| format!("hitsAddend {t:?} is not a whole number")),
        }
    }
}

/// Reads a `RateLimitRequest` in the JSON mapping; the error says what is wrong with the body.
pub fn request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let raw: JsonRequest =
        serde_json::from_slice(body).map_err(|e| format!("not a RateLimitRequest in JSON: {e}"))?;
    let descriptors = raw
        .descriptors
        .into_iter()
        .map(|d| {
            let limit = match d.limit {
                None => None,
                Some(o) => Some(RateLimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit: RateLimitUnit::from_str_name(&o.unit).ok_or_else(|| {
                        format!(
                            "unknown limit unit {:?}: use SECOND, MINUTE, HOUR, DAY, MONTH or \
                                 YEAR",
                            o.unit
                        )
                    })? as i32,
                }),
            };
            Ok(RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        key: e.key,
                        value: e.value,
                    })
                    .collect(),
                limit,
                hits_addend: d
                    .hits_addend
                    .map(|h| h.value().map(|value| UInt64Value { value }))
                    .transpose()?,
                is_negative_hits: d.is_negative_hits,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(RateLimitRequest {
        domain: raw.domain,
        descriptors,
        hits_addend: raw.hits_addend,
    })
}

/// The HTTP status and JSON body of an answer.
pub fn response(answer: &RateLimitResponse) -> (StatusCode, String) {
    let overall = code_name(answer.overall_code);
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(overall));
    let statuses: Vec<Value> = answer.statuses.iter().map(status).collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    let headers: Vec<Value> = answer
        .response_headers_to_add
        .iter()
        .map(|h| json!({"key": h.key, "value": h.value}))
        .collect();
    if !headers.is_empty() {
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    let http = if answer.overall_code == Code::OverLimit as i32 {
        StatusCode::TOO_MANY_REQUESTS
    } else if answer.overall_code == Code::Ok as i32 {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (http, Value::Object(out).to_string())
}

fn status(s: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    out.insert("code".into(), json!(code_name(s.code)));
    if let Some(limit) = &s.current_limit {
        let mut l = Map::new();
        if !limit.name.is_empty() {
            l.insert("name".into(), json!(limit.name));
        }
        if limit.requests_per_unit != 0 {
            l.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
        }
        let unit = Unit::try_from(limit.unit).unwrap_or(Unit::Unknown);
        if unit != Unit::Unknown {
            l.insert("unit".into(), json!(unit.as_str_name()));
        }
        out.insert("currentLimit".into(), Value::Object(l));
    }
    if s.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(s.limit_remaining));
    }
    if let Some(d) = &s.duration_until_reset {
        out.insert(
            "durationUntilReset".into(),
            json!(duration(d.seconds, d.nanos)),
        );
    }
    Value::Object(out)
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).unwrap_or(Code::Unknown).as_str_name()
}

/// A `google.protobuf.Duration` in the JSON mapping: seconds with 0, 3, 6 or 9 decimals.
fn duration(seconds: i64, nanos: i32) -> String {
    let nanos = nanos.unsigned_abs();
    if nanos == 0 {
        format!("{seconds}s")
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{seconds}.{:03}s", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{seconds}.{:06}s", nanos / 1_000)
    } else {
        format!("{seconds}.{nanos:09}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_the_json_mapping() {
        assert_eq!(duration(20, 0), "20s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(0, 1_000), "0.000001s");
        assert_eq!(duration(0, 7), "0.000000007s");
    }

    #[test]
    fn requests_take_either_spelling_and_string_integers() {
        let r = request(
            br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"5"}]}"#,
        )
        .unwrap();
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].hits_addend, Some(UInt64Value { value: 5 }));
        assert_eq!(r.descriptors[0].entries[0].value, "v");
        let bad = request(br#"{"domain":"d","descriptors":[{"entries":[],"colour":1}]}"#);
        assert!(bad.unwrap_err().contains("colour"));
    }
}
