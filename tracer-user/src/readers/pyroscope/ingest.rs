//! One request of Pyroscope's ingest API (`POST /ingest`, its server API reference): the
//! profile's series as the `name` query parameter (`app{label=value,…}`), its time range as
//! `from` and `until` (Unix seconds), `format=pprof`, and the body as its own clients send a
//! pprof profile: `multipart/form-data` with the gzipped profile in the `profile` part, and a
//! `sample_type_config` part that says what the values are: waits and nanoseconds waited per
//! interval (summed, not cumulative as Go's runtime counts them), shown as a block profile.

/// The application name every profile is pushed under.
pub const APPLICATION: &str = "thrtrace.contention";
/// The multipart boundary; a profile part that holds it is sent with another.
const BOUNDARY: &str = "thrtrace-bpf-profile-7c1e0b9a";
/// How Pyroscope reads the profile's two values.
const SAMPLE_TYPE_CONFIG: &str = r#"{"contentions":{"units":"lock_samples","display-name":"block_count","aggregation":"sum","cumulative":false},"delay":{"units":"lock_nanoseconds","display-name":"block_duration","aggregation":"sum","cumulative":false}}"#;

/// A profile to push.
#[derive(Debug)]
pub struct Ingest {
    /// `thrtrace.contention{service_name=…,…}`.
    pub name: String,
    /// The interval it covers, Unix seconds.
    pub from: u64,
    pub until: u64,
    /// Gzipped profile.proto.
    pub profile: Vec<u8>,
}

impl Ingest {
    /// The series name of `labels`, each value kept to what the name's syntax can carry.
    pub fn series(labels: &[(&str, &str)]) -> String {
        let labels: Vec<String> = labels
            .iter()
            .map(|(key, value)| format!("{key}={}", label_value(value)))
            .collect();
        format!("{APPLICATION}{{{}}}", labels.join(","))
    }

    /// The request's body and its content type.
    pub fn body(&self) -> (Vec<u8>, String) {
        let mut boundary = BOUNDARY.to_owned();
        while self
            .profile
            .windows(boundary.len())
            .any(|w| w == boundary.as_bytes())
        {
            boundary.push('x');
        }
        let mut body = Vec::with_capacity(self.profile.len() + 512);
        let mut part = |headers: &str, content: &[u8]| {
            body.extend_from_slice(format!("--{boundary}\r\n{headers}\r\n\r\n").as_bytes());
            body.extend_from_slice(content);
            body.extend_from_slice(b"\r\n");
        };
        part(
            "Content-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n\
             Content-Type: application/octet-stream",
            &self.profile,
        );
        part(
            "Content-Disposition: form-data; name=\"sample_type_config\"; \
             filename=\"sample_type_config.json\"\r\nContent-Type: application/json",
            SAMPLE_TYPE_CONFIG.as_bytes(),
        );
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        (body, format!("multipart/form-data; boundary={boundary}"))
    }

    /// Its request to `target` (the ingest API's URL) with `agent`, and the request's body.
    pub fn request(
        &self,
        agent: &ureq::Agent,
        target: &str,
    ) -> (ureq::RequestBuilder<ureq::typestate::WithBody>, Vec<u8>) {
        let (body, content_type) = self.body();
        let request = agent
            .post(target)
            .query("name", &self.name)
            .query("from", self.from.to_string())
            .query("until", self.until.to_string())
            .query("format", "pprof")
            .query("spyName", "thrtrace-bpf")
            .header("Content-Type", content_type);
        (request, body)
    }
}

/// `value` as a label value of a series name: the characters the name's syntax separates
/// with (`{`, `}`, `,`, `=`) and any but plain printable ones become `_`; at most 128.
fn label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' | '.' | ':' | '/' | '@' | '+' => c,
            _ => '_',
        })
        .take(128)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_name_carries_no_separator_from_its_values() {
        assert_eq!(
            Ingest::series(&[("service_name", "my,app}={x"), ("pid", "42")]),
            "thrtrace.contention{service_name=my_app___x,pid=42}"
        );
        assert_eq!(label_value(&"é".repeat(300)).len(), 128);
    }

    #[test]
    fn the_body_is_a_form_whose_boundary_is_not_in_the_profile() {
        let ingest = Ingest {
            name: String::new(),
            from: 1,
            until: 2,
            profile: format!("ab--{BOUNDARY}cd").into_bytes(),
        };
        let (body, content_type) = ingest.body();
        let boundary = content_type.split("boundary=").nth(1).unwrap();
        assert_eq!(boundary, format!("{BOUNDARY}x"));
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n")));
        assert!(text.contains(&format!("\r\n\r\nab--{BOUNDARY}cd\r\n--{boundary}\r\n")));
        assert!(text.contains(SAMPLE_TYPE_CONFIG));
        assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
    }
}
