//! TLS on the gRPC listener (`--grpc-tls-cert`, `--grpc-tls-key`, `--grpc-tls-client-ca`): a
//! client that trusts the service's CA is answered; a plain-text client, or (with mutual TLS) a
//! client without a certificate, is not. The certificates are made by the test, for
//! `localhost`, on loopback.

use crate::support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use support::{ConfigDir, Rls, code, request};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const API: &str = "
domain: api
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

/// A CA, and a certificate with its key that the CA signed for `name`, as PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

async fn tls_channel(rls: &Rls, tls: ClientTlsConfig) -> Result<Channel, tonic::transport::Error> {
    Channel::from_shared(format!("https://{}", rls.addr))
        .unwrap()
        .tls_config(tls.domain_name("localhost"))?
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_is_served_over_tls_to_clients_that_trust_the_ca() {
    let server = pki("localhost");
    let config = ConfigDir::new(&[("api.yaml", API)]);
    let (cert, key) = (config.0.join("tls.crt.pem"), config.0.join("tls.key.pem"));
    std::fs::write(&cert, &server.cert).unwrap();
    std::fs::write(&key, &server.key).unwrap();
    let rls = Rls::start_in(
        config,
        &[
            "--grpc-tls-cert",
            cert.to_str().unwrap(),
            "--grpc-tls-key",
            key.to_str().unwrap(),
        ],
    );
    let trusting = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&server.ca));
    let mut client = RateLimitServiceClient::new(tls_channel(&rls, trusting).await.unwrap());
    let answer = client
        .should_rate_limit(request("api", &[&[("client", "t")]]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses[0].limit_remaining, 1);
    // Plain text to the TLS port gets no answer.
    let mut plain = RateLimitServiceClient::new(rls.channel().await);
    assert!(
        plain
            .should_rate_limit(request("api", &[&[("client", "t")]]))
            .await
            .is_err()
    );
    // A client that trusts another CA refuses the service's certificate.
    let other = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pki("localhost").ca));
    assert!(tls_channel(&rls, other).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_answers_only_clients_with_a_certificate_of_the_client_ca() {
    let (server, client_pki) = (pki("localhost"), pki("envoy"));
    let config = ConfigDir::new(&[("api.yaml", API)]);
    let paths: Vec<_> = ["tls.crt.pem", "tls.key.pem", "clients.ca.pem"]
        .iter()
        .map(|name| config.0.join(name))
        .collect();
    for (path, pem) in paths
        .iter()
        .zip([&server.cert, &server.key, &client_pki.ca])
    {
        std::fs::write(path, pem).unwrap();
    }
    let flags = ["--grpc-tls-cert", "--grpc-tls-key", "--grpc-tls-client-ca"];
    let args: Vec<&str> = flags
        .iter()
        .zip(&paths)
        .flat_map(|(flag, path)| [*flag, path.to_str().unwrap()])
        .collect();
    let rls = Rls::start_in(config, &args);
    let trusting = || ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&server.ca));
    let with_cert = trusting().identity(Identity::from_pem(&client_pki.cert, &client_pki.key));
    let mut client = RateLimitServiceClient::new(tls_channel(&rls, with_cert).await.unwrap());
    let req = request("api", &[&[("client", "m")]]);
    assert!(client.should_rate_limit(req.clone()).await.is_ok());
    // Without a client certificate the handshake, or the first call, fails.
    let refused = match tls_channel(&rls, trusting()).await {
        Err(_) => true,
        Ok(channel) => RateLimitServiceClient::new(channel)
            .should_rate_limit(req)
            .await
            .is_err(),
    };
    assert!(refused);
}
