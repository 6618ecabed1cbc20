//! Near misses from gitleaks' default rule set: the false-positive test cases of its
//! rules — placeholders, values of the wrong length, case or alphabet, prefixes inside
//! other words, public material, prose. Shapes drawn at random are ctxd's own
//! generators; the rest are the test cases' text.
//!
//! Left out are the cases that are a false positive for one gitleaks rule only and a
//! secret by another (or by gitleaks' own generic rule): a random value under a key
//! named `token`, `api_token` or `api-key` (`"token1": "xoxp-1234567890"`,
//! `DATABRICKS_TOKEN=dapi1234…defg5`, `nonMatchingToken := "sm_pat_…"`,
//! `meraki-api-key: acdeFf05…`, the malformed Telegram tokens in
//! `telegram_api_token = "…"`, `SUMO_ACCESS_KEY: AbCeFG123`), a JWT sent as a `Basic`
//! credential, a sibling Cloudflare or Anthropic key format, published API keys that
//! gitleaks allows by name (Google's, Yarn's, NuGet's documentation samples), and the
//! cases that differ only by the file's path.

use super::rng::Rng;

/// A near miss's generator.
pub(crate) type MakeNearMiss = fn(&mut Rng) -> String;

/// Every case: `(kind, generator)`, one sample each. Kinds are `gitleaks/<rule id>`.
pub(crate) const NEAR_MISSES: &[(&str, MakeNearMiss)] = &[
    ("gitleaks/aws-access-token", |_| {
        "key = AKIAXXXXXXXXXXXXXXXX".to_owned()
    }),
    ("gitleaks/aws-access-token", |_| {
        "aws_access_key: AKIAIOSFODNN7EXAMPLE".to_owned()
    }),
    ("gitleaks/aws-access-token", |_| {
        "msgstr \"Näytä asiakirjamallikansio.\"".to_owned()
    }),
    ("gitleaks/aws-access-token", |_| {
        "TODAYINASIAASACKOFRICEFELLOVER".to_owned()
    }),
    ("gitleaks/aws-access-token", |r| {
        // A DNA sequence: long runs of capitals in which AKIA/ASIA/ACCA occur.
        let mut sequence = String::new();
        for _ in 0..40 {
            sequence.push_str(&r.chars("ACGT", 24));
            let joint: &&str = r.pick(&["-", "--", "ACCA", "ASIA", "-A-"]);
            sequence.push_str(joint);
        }
        sequence
    }),
    ("gitleaks/aws-amazon-bedrock-api-key-long-lived", |_| {
        "ABSKQmVkcm9ja0FQSUtleS1EXAMPLE".to_owned()
    }),
    ("gitleaks/aws-amazon-bedrock-api-key-long-lived", |r| {
        format!("AXSKQmVkcm9ja0FQSUtleS1{}=", r.alnum(108))
    }),
    ("gitleaks/aws-amazon-bedrock-api-key-short-lived", |_| {
        "bedrock-api-key-".to_owned()
    }),
    ("gitleaks/aws-amazon-bedrock-api-key-short-lived", |_| {
        "bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29x".to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "![图源：《深入拆解Tomcat & Jetty》](https://p3-juejin.byteimg.com/tos-cn-i-k3u1fbpfcp/6a9e704af49b4380bb686f0c96d33b81~tplv-k3u1fbpfcp-watermark.image)".to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| "~".repeat(40)),
    ("gitleaks/azure-ad-client-secret", |_| "~".repeat(43)),
    ("gitleaks/azure-ad-client-secret", |_| {
        ".ui.visible.right.sidebar~.ui.visible.left.sidebar~.pusher{transform:translate3d(0,0,0)}"
            .to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "buf.WriteString(\"~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\\n\\n::\\n\\n\")".to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "'url': 'http://www.2doc.nl/speel~VARA_101375237~mh17-het-verdriet-van-nederland~.html',"
            .to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "@ar = split(\"~\", \"965f1453~47~09414c93e4cef985416f472549220827da3ba6fed8ad28e29ef6ad170ad53a69051e9b06f439ef6da5df8670181f7eb2481650\");".to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "'#!/registries/5/portainer.demo~2Fportainerregistrytesting~2Falpine',".to_owned()
    }),
    ("gitleaks/azure-ad-client-secret", |r| {
        format!(
            "// CloudFront-Signature: {}~{}Q~{}~{}__, , , false",
            r.b64url(120),
            r.b64url(30),
            r.b64url(40),
            r.b64url(60)
        )
    }),
    ("gitleaks/azure-ad-client-secret", |r| {
        format!(
            "+ \"<Trust Comment=\\\"\\\" Identity=\\\"USK@{},4~q8Q~{}~yk0,AQACAAE/WebOfTrustRC2/2\\\" Value=\\\"100\\\"/>\"",
            r.b64url(43),
            r.alnum(33)
        )
    }),
    ("gitleaks/azure-ad-client-secret", |_| {
        "client_secret=bP88Q~xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx".to_owned()
    }),
    ("gitleaks/beamer-api-token", |_| {
        "│   ├── R21A-A-V010SP13RC181024R16900-CN-B_250K-Release-OTA-97B6C6C59241976086FABDC41472150C.bfu".to_owned()
    }),
    ("gitleaks/artifactory-api-key", |_| {
        format!("lowEntropy := AKCp{}", "X".repeat(69))
    }),
    ("gitleaks/artifactory-api-key", |r| {
        format!("wrongStart := \"AkCp{}\"", r.lower_alnum(69))
    }),
    ("gitleaks/artifactory-api-key", |r| {
        format!("wrongLength := \"AkCp{}\"", r.lower_alnum(59))
    }),
    ("gitleaks/artifactory-api-key", |r| {
        format!(
            "partOfAlongUnrelatedBlob gYnkgAkCp{}VyZSB2",
            r.lower_alnum(69)
        )
    }),
    ("gitleaks/artifactory-reference-token", |_| {
        format!("lowEntropy := cmVmd{}", "X".repeat(59))
    }),
    ("gitleaks/artifactory-reference-token", |r| {
        format!("wrongStart := \"cmVMd{}\"", r.lower_alnum(59))
    }),
    ("gitleaks/artifactory-reference-token", |r| {
        format!("wrongLength := \"cmVmd{}\"", r.lower_alnum(49))
    }),
    ("gitleaks/artifactory-reference-token", |r| {
        format!(
            "partOfAlongUnrelatedBlob gYnkgcmVmd{}VyZSB2",
            r.lower_alnum(59)
        )
    }),
    ("gitleaks/anthropic-api-key", |_| {
        "sk-ant-api03-abc123xyz-456de-klMnopqrstuvwx-3456yza789bcde-1234fghijklmnopAA".to_owned()
    }),
    ("gitleaks/anthropic-api-key", |_| {
        "sk-ant-api03-abc123xyz-456def789ghij-klmnopqrstuvwx-3456yza789bcde-1234fghijklmnopby56aaaogaopaaaabc123xyzBB".to_owned()
    }),
    ("gitleaks/anthropic-admin-api-key", |_| {
        "sk-ant-admin01-abc123xyz-456de-klMnopqrstuvwx-3456yza789bcde-1234fghijklmnopAA".to_owned()
    }),
    ("gitleaks/clickhouse-cloud-api-secret-key", |_| {
        format!("key = 4b1d{}", "X".repeat(38))
    }),
    ("gitleaks/clickhouse-cloud-api-secret-key", |r| {
        format!("key = adf4b1d{}", r.alnum(38))
    }),
    ("gitleaks/cohere-api-token", |_| {
        format!("CO_API_KEY={}", "x".repeat(40))
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl https://example.com/micropub -d h=entry -d \"content=Hello World\" -H \"Authorization: Bearer XXXXXXXXXXXX\"".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl -X POST https://accounts.spotify.com/api/token -d grant_type=client_credentials --header \"Authorization: Basic ...\"".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl \\\n  -H \"Authorization: Bearer <Openverse API token>\" \\\n  \"https://api.openverse.org/v1/audio/?q=test\"".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl -v -v -v -X POST https://domain/api/v1/authentication/sso/login-url/ \\\n  -H 'Content-Type: application/json' \\\n  -H \"Authorization: Token **********\" \\\n  -d '{\"username\": \"test\", \"next\": \"/luna/\"}'".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl -XPOST http://localhost:8080/api/token -H \"Authorization: basic {base64(email:password[\\n])}\" => token".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl -X GET \\\n     -H \"apikey: $API_KEY\" \\\n     -H \"Accept: $FORMAT\" \\\n\"$API_URL/rest/v1/stats_derniere_labellisation\"".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "$ curl -X POST \"http://localhost:8000/v1/chat/completions\" \\\n    -H \"Content-Type: application/json\" \\\n    -H \"Authorization: Bearer $API_KEY\" \\\n    -d '{\n        \"model\": \"chatglm3-6b-32k\",\n        \"messages\": [{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user\", \"content\": \"Hello!\"}]\n    }'".to_owned()
    }),
    ("gitleaks/curl-auth-header", |_| {
        "curl -X GET -H \"Content-Type: application/json\" -H \"Authorization: Bearer $(gcloud auth print-access-token)\" https://workflowexecutions.googleapis.com/v1/projects/244283331594/locations/us-central1/workflows/sample-workflow/executions/43c925aa-514a-44c1-a0a4-a9f8f26fd2cb/callbacks/1705791f-d446-4e92-a6d0-a13622422e80_31864a51-8c13-4b03-ad4d-945cdc8d0631".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -i -u 'test:test'".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "   curl -sL --user \"$1:$2\" \"$3\" > \"$4\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u <user:password> https://test.com/endpoint".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl --user neo4j:[PASSWORD] http://[IP]:7474/db/data/".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u \"myusername\" http://localhost:15130/api/check_user/".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u username:token".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u \"${_username}:${_password}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u \"${username}\":\"${password}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -k -X POST -I -u \"SRVC_JENKINS:${APPID}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -u \":\" https://localhost:9200".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -sw '%{http_code}' -X POST --user '$USERNAME:$PASSWORD' $GItHUB_API_URL/$GIT_COMMIT --data".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl --user \"xxx:yyy\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "           curl -sL --user \"$GITHUB_USERNAME:$GITHUB_PASSWORD\" \"$GITHUB_URL\" > \"$TESTS_PATH\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl --silent --fail {{- if and $.Values.username $.Values.password }} --user \"{{ $.Values.username }}:{{ $.Values.password }}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -XGET -i -u \"${{ env.ELK_ID }}:${{ build.env.ELK_PASS }}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -XGET -i -u \"${{needs.vault.outputs.account_id}}:${{needs.vault.outputs.account_password}}\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl -X POST --user \"$(cat ./login.txt):$(cat ./password.txt)\"".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl http://127.0.0.1:5000/file --user user:pass --digest        # digest auth".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "   curl -X GET --insecure --user \"username:password\" \\".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl --silent --insecure --user ${f5user}:${f5pass} \\".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "curl --insecure --ssl-reqd \"smtps://smtp.gmail.com\" --mail-from \"src@gmail.com\" --mail-rcpt \"dst@gmail.com\" --user \"src@gmail.com\" --upload-file out.txt".to_owned()
    }),
    ("gitleaks/curl-auth-user", |_| {
        "#HTTP command line test\ncurl -X POST -H \"Content-Type: application/json\" -d '{\"id\":12345,\"geo\":{\"latitude\":28.50,\"longitude\":-81.14}}' http://<ip>:8080/serve\n\n#UDP command line test\necho -n '{\"type\":\"serve\",\"channel\":\"/\",\"data\":{\"site_id\":8,\"post_id\":12345,\"geo\":{\"lat\":28.50,\"long\":-81.14}}}' >/dev/udp/127.0.0.1/41234\n\n#UDP Listener (for confirmation)\nnc -u -l 41234".to_owned()
    }),
    ("gitleaks/discord-client-id", |_| {
        format!("discord={}", "0".repeat(18))
    }),
    ("gitleaks/discord-client-secret", |_| {
        format!("discord={}", "0".repeat(32))
    }),
    ("gitleaks/easypost-api-token", |_| {
        "...6wqX6fNUXA/rYqRvfQ+EZAKGqQRiRyqAFRQshGPWOIAwNWGORfKHSBnVNFtVmWYoW6PH23lkqbbDWep95C/3VmWq/edti6...".to_owned()
    }),
    ("gitleaks/easypost-test-api-token", |_| {
        "...6wqX6fNUXA/rYqRvfQ+EZTKGqQRiRyqAFRQshGPWOIAwNWGORfKHSBnVNFtVmWYoW6PH23lkqbbDWep95C/3VmWq/edti6...".to_owned()
    }),
    ("gitleaks/etsy-access-token", |r| {
        format!("SetSysctl = \"{}\"", r.lower_alnum(24))
    }),
    ("gitleaks/etsy-access-token", |_| {
        "\tif err := sysctl.SetSysctl(sysctlBridgeCallIPTables); err != nil {".to_owned()
    }),
    ("gitleaks/etsy-access-token", |r| {
        format!(
            "g6Rib2R5hqhkZXRhY2hlZMOpaGFzaF90eXBlCqNrZXnEIwEgETSYcPQ{}",
            r.b64(200)
        )
    }),
    ("gitleaks/etsy-access-token", |_| {
        "in XCBuild.XCBBuildServiceSession.setSystemInfo(operatingSystemVersion: __C.NSOperatingSystemVersion, productBuildVersion: Swift.String, nativeArchitecture: Swift.String, completion: (Swift.Bool) -> ()) -> ()".to_owned()
    }),
    ("gitleaks/facebook-page-access-token", |_| {
        "eaaaC0b75a9329fded2ffa9a02b47e0117831b82".to_owned()
    }),
    ("gitleaks/facebook-page-access-token", |_| {
        "\"strict-uri-encode@npm:^2.0.0\":\n  version: 2.0.0\n  resolution: \"strict-uri-encode@npm:2.0.0\"\n  checksum: eaac4cf978b6fbd480f1092cab8b233c9b949bcabfc9b598dd79a758f7243c28765ef7639c876fa72940dac687181b35486ea01ff7df3e65ce3848c64822c581\n  languageName: node\n  linkType: hard".to_owned()
    }),
    ("gitleaks/flyio-access-token", |_| {
        format!(
            "resource \"doppler_integration_flyio\" \"prod\" {{\n  name    = \"TF Fly.io\"\n  api_key = \"fo1_{}\"\n}}",
            "x".repeat(43)
        )
    }),
    ("gitleaks/flyio-access-token", |_| {
        "pub const MINIDUMP_SYSMEMINFO1_PERF_CCTOTALDIRTYPAGES_CCDIRTYPAGETHRESHOLD: u32 = 4u32;"
            .to_owned()
    }),
    ("gitleaks/flyio-access-token", |r| {
        format!(
            "<input type=\"hidden\" name=\"authenticity_token\" value=\"7SWa-Fo1_{}\" autocomplete=\"off\" />",
            r.b64url(80)
        )
    }),
    ("gitleaks/flyio-access-token", |_| {
        "<p><span class=\"emoji\">🗣️</span> Adobe illustrator软件基础精讲课程<br><br><span class=\"emoji\">🏷️</span> <a href=\"https://t.me/abskoop/8565?q=%23%E8%AE%BE%E8%AE%A1%E5%B8%88\">#设计师</a></p>".to_owned()
    }),
    ("gitleaks/gcp-api-key", |_| {
        "GWw4hjABFzZCGiRpmlDyDdo87Jn9BN9THUA47muVRNunLxsa82tMAdvmrhOqNkRKiYMEAFbTJAIzaTesb6Tscfcni8vIpWZqNCXFDFslJtVSvFDq".to_owned()
    }),
    ("gitleaks/gcp-api-key", |_| {
        "AIzaTesb6Tscfcni8vIpWZqNCXFDFslJtVSvFDqabcd123".to_owned()
    }),
    ("gitleaks/gcp-api-key", |_| {
        format!("apiKey: \"AIza{}\"", "a".repeat(35))
    }),
    ("gitleaks/gcp-api-key", |_| {
        "AIZASYCO2CXRMC9ELSKLHLHRMBSWDEVEDZTLO2O".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "\"accessor\":\"rA1wk0Y45YCufyfq\",".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("report_access_id: {}", r.uuid())
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("accessibilityYesOptionId = \"{}\"", r.uuid())
    }),
    ("gitleaks/generic-api-key", |_| {
        "_RandomAccessIterator>\n_LIBCPP_CONSTEXPR_AFTER_CXX11 ".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "this.ultraPictureBox1.Name = \"ultraPictureBox1\";".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "rapidstring:marm64-uwp=fail".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "event-bus-message-api:rc0.15.0_20231217_1420-SNAPSHOT'".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "COMMUNICATION_API_VERSION=rc0.13.0_20230412_0712-SNAPSHOT".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("MantleAPI_version={}", r.hex(40))
    }),
    ("gitleaks/generic-api-key", |_| {
        "[DEBUG]\t\torg.slf4j.slf4j-api:jar:1.7.8.:compile (version managed from default)"
            .to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "[DEBUG]\t\torg.neo4j.neo4j-graphdb-api:jar:3.5.12:test".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "apiUrl=apigee.corpint.com".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "X-API-Name\": \"NRG0-Hermes-INTERNAL-API\",".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "author = \"james.fake@ymail.com\",".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "X-MS-Exchange-Organization-AuthSource: sm02915.int.contoso.com".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "Authentication-Results: 5h.ca.iphmx.com".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!(
            "withCredentials([usernamePassword(credentialsId: '{}', usernameVariable: 'USERNAME', passwordVariable: 'PASSWORD')]) {{",
            r.uuid()
        )
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("credentialsId: '{}'", r.uuid())
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("jobCredentialsId: '{}'", r.uuid())
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("  \"credentialId\": \"{}\",", r.alnum(22))
    }),
    ("gitleaks/generic-api-key", |_| {
        "environment {\n\tCREDENTIALS_ID = \"K8S_CRED\"\n}".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "dev.credentials.url=dev-lb1.api.f4ke.com:5215".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "keyword: \"Befaehigung_P2\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("public_key = \"{}\"", r.alnum(43))
    }),
    ("gitleaks/generic-api-key", |_| {
        "pub const X509_pubkey_st = struct_X509_pubkey_st;".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "|| pIdxKey->default_rc==0".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "monkeys-audio:mx64-uwp=fail".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("primaryKey={}", r.alnum(30))
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("foreignKey={}", r.alnum(30))
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("key_down_event={}", r.alnum(30))
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("issuerKeyHash={}", r.alnum(30))
    }),
    ("gitleaks/generic-api-key", |_| {
        "<entry key=\"jetbrains.mps.v8_elimination\" value=\"executed\" />".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "minisat-master-keying:x64-uwp=fail".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "IceSSL.KeyFile=s_rsa1024_priv.pem".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "\"bucket_key\": \"SalesResults-1.2\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "<key tag=\"SecurityIdentifier\" name=\"SecurityIdentifier\" type=\"STRING\" />".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "schemaKey = 'DOC_Vector_5_32'".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "sequenceKey = \"18\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "app.keystore.file=env/cert.p12".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "-DKEYTAB_FILE=/tmp/app.keytab".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "\tdoc.Security.KeySize = PdfEncryptionKeySize.Key128Bit;".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "o.keySelector=n,o.haKey=!1,".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "                                \"key_name\": \"prod5zyxlmy-cmk\",".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!(
            "                                \"kms_key_id\": \"{}\",",
            r.uuid()
        )
    }),
    ("gitleaks/generic-api-key", |_| {
        "\t\"key_vault_name\": \"web21prqodx24021\",".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "  keyVaultToStoreSecrets: cmp2-qat-1208358310".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "const validKeyChars = \"0123456789abcdefghijklmnopqrstuvwxyz_-.\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "const keyStr = \"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789\""
            .to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "key_length = XSalsa20.key_length".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "pub const SN_id_Gost28147_89_None_KeyMeshing = \"id-Gost28147-89-None-KeyMeshing\""
            .to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "KeyPair = X25519.KeyPair".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "BlindKeySignatures = Ed25519.BlindKeySignatures".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("AVEncVideoMaxKeyframeDistance, \"{}\"", r.uuid())
    }),
    ("gitleaks/generic-api-key", |_| {
        "            keyPressed = kVK_Return.u16".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "timezone_mapping = {\n    \"Turkey Standard Time\": \"Europe/Istanbul\",\n}".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "password combination.\n\nR5: Regulatory--21".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| "PuttyPassword=0".to_owned()),
    ("gitleaks/generic-api-key", |_| {
        "LLM_SECRET_NAME = \"NEXUS-GPT4-API-KEY\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("  <UserSecretsId>{}</UserSecretsId>", r.uuid())
    }),
    ("gitleaks/generic-api-key", |_| {
        "secret_length = X25519.secret_length".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "secretSize must be >= XXH3_SECRET_SIZE_MIN".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "# get build time secret for authentication\n#RUN --mount=type=secret,id=jfrog_secret \\\n#    JFROG_SECRET = $(cat /run/secrets/jfrog_secret) && \\".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "    access_token_url='https://github.com/login/oauth/access_token',".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("publicToken = \"{}\"", r.alnum(43))
    }),
    ("gitleaks/generic-api-key", |_| {
        "<SourceFile SourceLocation=\"F:\\Extracts\\\" TokenFile=\"RTL_INST_CODE.cer\">".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "notes            = \"Maven - io.jsonwebtoken:jjwt-jackson-0.11.2\"".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("csrf-token={}==", r.b64(86))
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("clientId = \"{}\"", r.uuid())
    }),
    ("gitleaks/generic-api-key", |_| {
        "GITHUB_API_KEY=\nDYNATRACE_API_KEY=".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "snowflake.password=\njdbc.snowflake.url=".to_owned()
    }),
    ("gitleaks/generic-api-key", |_| {
        "import { chain_Anvil1_Key, chain_Anvil2_Key } from '../blockchain-tests/pallets/supported-chains/consts';".to_owned()
    }),
    ("gitleaks/generic-api-key", |r| {
        format!("SRCREV_moby = \"{}\"", r.hex(40))
    }),
    ("gitleaks/generic-api-key", |r| {
        format!(
            "LIC_FILES_CHKSUM = \"file://${{WORKDIR}}/license.html;md5={}\"",
            r.hex(32)
        )
    }),
    ("gitleaks/github-pat", |_| format!("ghp_{}", "x".repeat(36))),
    ("gitleaks/github-fine-grained-pat", |_| {
        format!("github_pat_{}_{}", "x".repeat(22), "x".repeat(59))
    }),
    ("gitleaks/github-oauth", |_| {
        format!("gho_{}", "x".repeat(36))
    }),
    ("gitleaks/github-app-token", |_| {
        format!("ghu_{}", "x".repeat(36))
    }),
    ("gitleaks/github-app-token", |_| {
        format!("ghs_{}", "x".repeat(36))
    }),
    ("gitleaks/github-refresh-token", |_| {
        format!("ghr_{}", "x".repeat(36))
    }),
    ("gitleaks/gitlab-pat", |_| {
        "glpat-XXXXXXXXXXX-XXXXXXXX".to_owned()
    }),
    ("gitleaks/gitlab-pat-routable", |_| {
        "glpat-xxxxxxxx-xxxxxxxxxxxxxxxxxx.xxxxxxxxx".to_owned()
    }),
    ("gitleaks/gitlab-ptt", |_| {
        format!("glptt-{}", "x".repeat(40))
    }),
    ("gitleaks/gitlab-rrt", |_| {
        "GR134894112312312312312312312".to_owned()
    }),
    ("gitleaks/gitlab-rrt", |_| {
        format!("GR1348941{}", "X".repeat(20))
    }),
    (
        "gitleaks/gitlab-runner-authentication-token-routable",
        |_| "glrt-tx_xxxxxxxxxxxxxxxxxxxxxxxxxxx.xxxxxxxxx".to_owned(),
    ),
    ("gitleaks/grafana-cloud-api-token", |_| {
        format!("glc_{}", "x".repeat(68))
    }),
    ("gitleaks/grafana-cloud-api-token", |_| {
        format!("   API_KEY=\"glc_{}=\"", "1".repeat(42))
    }),
    ("gitleaks/grafana-cloud-api-token", |_| {
        "static void GLC_CreateLightmapTextureArray(void);\nstatic void GLC_CreateLightmapTexturesIndividual(void);\nvoid GLC_UploadLightmap(int textureUnit, int lightmapnum);".to_owned()
    }),
    ("gitleaks/grafana-cloud-api-token", |_| {
        "// Alias models\nvoid GLC_StateBeginUnderwaterAliasModelCaustics(texture_ref base_texture, texture_ref caustics_texture)\n{".to_owned()
    }),
    ("gitleaks/grafana-service-account-token", |_| {
        format!("glsa_{}_AAAAAAAA", "X".repeat(32))
    }),
    ("gitleaks/hashicorp-tf-api-token", |_| {
        format!(
            "token        = \"{}.atlasv1.{}\"",
            "x".repeat(14),
            "x".repeat(67)
        )
    }),
    ("gitleaks/hashicorp-tf-password", |_| {
        "administrator_login_password = var.db_password".to_owned()
    }),
    ("gitleaks/hashicorp-tf-password", |_| {
        "password = \"${aws_db_instance.default.password}\"".to_owned()
    }),
    ("gitleaks/hashicorp-tf-password", |_| {
        "password       = \"rootpasswd\"".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "- (id)hf_requiredCharacteristicTypesForDisplayMetadata;".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "amazon.de#@#div[data-cel-widget=\"desktop-rhf_SponsoredProductsRemoteRHFSearchEXPSubsK2ClickPagination\"]".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "                            _kHMSymptomhf_generatedByHomeAppForDebuggingPurposesKey,"
            .to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "    #define OSCHF_DebugGetExpectedAverageCrystalAmplitude NOROM_OSCHF_DebugGetExpectedAverageCrystalAmplitude".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "  M_UINT       (ServingCellPriorityParametersDescription_t,  H_PRIO,  2, &hf_servingcellpriorityparametersdescription_h_prio),".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "+HWI-ST565_0092:4:1101:5508:5860#ACTTGA/1\n\t\tbb_eeeeegfgffhiiiiiiiiiiihiiiiicgafhf_eefghihhiiiifhifhhdhifhiiiihifdgdhggf\\bbceceedbcd\n\t\t@HWI-ST565_0092:4:1101:7621:5770#ACTTGA/1".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        "                    change_dir(cwd)\n\t\tsubdirs = glob.glob('HF_CAASIMULIAComputeServicesBuildTime.HF*.Linux64')\n\t\tif len(subdirs) == 1:".to_owned()
    }),
    ("gitleaks/huggingface-access-token", |_| {
        format!(
            "        os.environ.get(\"HF_AUTH_TOKEN\",\n\t\t\"hf_{}\"),",
            "x".repeat(34)
        )
    }),
    ("gitleaks/huggingface-access-token", |_| {
        format!(
            "# HuggingFace API Token https://huggingface.co/settings/tokens\n\t\tHUGGINGFACE_API_TOKEN=hf_{},",
            "x".repeat(40)
        )
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        "public static final String API_ORG_EXIST = \"APIOrganizationExist\";".to_owned()
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        "const api_org_controller = require('../../controllers/api/index').organizations;"
            .to_owned()
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        "API_ORG_CREATE(\"https://qyapi.weixin.qq.com/cgi-bin/department/create?access_token=ACCESS_TOKEN\"),".to_owned()
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        "def test_internal_api_org_inclusion_with_href(api_name, href, expected, monkeypatch, called_with):\n\t\tmonkeypatch.setattr(\"requests.sessions.Session.request\", called_with)".to_owned()
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        "    def _api_org_96726c78_4ae3_402f_b08b_7a78c6903d2a(self, method, url, body, headers):\n        body = self.fixtures.load(\"api_org_96726c78_4ae3_402f_b08b_7a78c6903d2a.xml\")".to_owned()
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        format!(
            "<p>You should see a token <code>hf_xxxxx</code> (old tokens are <code>api_XXXXXXXX</code> or <code>api_org_{}</code>).</p>",
            "X".repeat(34)
        )
    }),
    ("gitleaks/huggingface-organization-api-token", |_| {
        format!(
            "  From Hugging Face docs:\n\t\tYou should see a token hf_xxxxx (old tokens are api_XXXXXXXX or api_org_{}).\n\t\tIf you do not submit your API token when sending requests to the API, you will not be able to run inference on your private models.",
            "x".repeat(34)
        )
    }),
    ("gitleaks/infracost-api-token", |_| {
        format!("ico-{}", "X".repeat(32))
    }),
    ("gitleaks/infracost-api-token", |r| {
        format!(
            "http://assets.r7.com/assets/media_box_tv_tres_colunas/video_box.ico-{}.png",
            r.hex(32)
        )
    }),
    ("gitleaks/infracost-api-token", |_| {
        "https://explosivelab.notion.site/Pianificazione-Nerdz-Ng-pubblico-1bc826ecc0994dd8915be97fc3489cde?pvs=74".to_owned()
    }),
    ("gitleaks/infracost-api-token", |_| {
        "http://ece252-2.uwaterloo.ca:2540/image?q=gAAAAABdHkoqb9ZaJ3q4dlzEvTgG9WYwKcD9Aw7OUXeFicO-5M5IdNDjHBpKw7KBK3nCVqtuga4yzUaFEpJn8BqA1LzZprIJBw==".to_owned()
    }),
    ("gitleaks/jwt-base64", |r| {
        format!(
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\nVersion: GnuPG/MacGPG2 v2\nComment: GPGTools - https://gpgtools.org\n\n{}\n=mIC1\n-----END PGP PUBLIC KEY BLOCK-----",
            r.pem_body("mQENBFOrMNcBCAC", 1600, "\n")
        )
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: ''\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: \"\"\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: {{ htpasswd }}\n---\napiVersion: v1\n                          kind: ReplicationController".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: Secret\nmetadata:\n  labels:\n    k8s-app: kubernetes-dashboard\n    addonmanager.kubernetes.io/mode: EnsureExists\n  name: kubernetes-dashboard-csrf\n  namespace: kubernetes-dashboard\ntype: Opaque\ndata:\n  csrf: \"\"\n\n---\n\napiVersion: v1\nkind: Secret\nmetadata:\n  labels:\n    k8s-app: kubernetes-dashboard\n    addonmanager.kubernetes.io/mode: EnsureExists\n  name: kubernetes-dashboard-key-holder\n  namespace: kubernetes-dashboard\ntype: Opaque\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        " kind: Secret\n target:\n   name: mysecret\n   creationPolicy: Owner\n\n---\n\nkind: ConfigMap\n data:\n       conversionStrategy: Default\n       decodingStrategy: None\n       key: secret/mysecret\n       property: foo\n     secretKey: foo".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nmetadata:\n  name: example\n  namespace: example-ns\nspec:\n  refreshInterval: 15s\n  secretStoreRef:\n    name: example\n    kind: SecretStore\n  target:\n    name: mysecret\n    creationPolicy: Owner\n  data:\n    - remoteRef:\n        conversionStrategy: Default\n        decodingStrategy: None\n        key: secret/mysecret\n        property: foo\n      secretKey: foo\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |r| {
        format!(
            "apiVersion: isindir.github.com/v1alpha3\nkind: SopsSecret\nmetadata:\n    name: app1-sopssecret\n    namespace: test\nspec:\n    suspend: false\n    secretTemplates:\n    -   name: ENC[AES256_GCM,data:{},iv:{}=,tag:{}==,type:str]\n        stringData:\n            db-password: ENC[AES256_GCM,data:{}==,iv:{}=,tag:{}==,type:str]\nsops:\n    kms: []\n    lastmodified: '2021-10-21T10:56:37Z'\n    mac: ENC[AES256_GCM,data:{}=,iv:{}=,tag:{}==,type:str]\n    pgp:\n    -   created_at: '2021-10-21T10:56:37Z'\n        enc: |\n            -----BEGIN PGP MESSAGE-----\n\n            {}\n            =V4l4\n            -----END PGP MESSAGE-----\n        fp: {}\n    encrypted_suffix: Templates\n    version: 3.6.1",
            r.b64(16),
            r.b64(43),
            r.b64(22),
            r.b64(6),
            r.b64(43),
            r.b64(22),
            r.b64(171),
            r.b64(43),
            r.b64(22),
            r.pem_body("hQGMA3muqimBu2IIAQwA", 600, "\n            "),
            r.chars("0123456789ABCDEF", 40)
        )
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\ndata:\n\textra: YmFyCg==\nkind: secret\nmetadata:\n\tname: secret-sa-sample\n\tannotations:\n\t\tkubernetes.io/service-account.name: 'sa-name'".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\n data:\n \tpassword: {{ .Values.Password }}\n kind: secret\n metadata:\n \tname: secret-sa-sample\n \tannotations:\n \t\tkubernetes.io/service-account.name: 'sa-name'".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: 'kubernetes-client.io/v1'\nmetadata:\n  name: actions-exporter\n  namespace: github-actions-exporter\nspec:\n  backendType: secretsManager\n  data:\n    - key: MySecretManagerKey\n      name: github_token\n      property: github_token\nkind: ExternalSecret\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: external-secrets.io/v1beta1\nspec:\n  secretStoreRef:\n    kind: ClusterSecretStore\n    name: aws-secretsmanager\n  refreshInterval: 1h\n  target:\n    creationPolicy: Owner\n  data:\n    - secretKey: api-key\n      remoteRef:\n        key: my-secrets-manager-secret\nmetadata:\n  name: api-key\n  namespace: my-namespace\nkind: ExternalSecret\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: isindir.github.com/v1alpha3\nspec:\n  secretTemplates:\n    - name: my-secret-name-1\n      labels:\n        label1: value1\n      annotations:\n        key1: value1\n      data:\n        data-name1: ZGF0YS12YWx1ZTE=\n        data-nameM: ZGF0YS12YWx1ZU0=\nkind: SopsSecret\nmetadata:\n  name: sopssecret-sample\n".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: secret\ndata:\n\textra: YmFyCg==\nmetadata:\n\tname: secret-sa-sample\n\tannotations:\n\t\tkubernetes.io/service-account.name: 'sa-name'".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: 'kubernetes-client.io/v1'\nkind: ExternalSecret\nmetadata:\n  name: actions-exporter\n  namespace: github-actions-exporter\nspec:\n  backendType: secretsManager\n  data:\n    - key: MySecretManagerKey\n      name: github_token\n      property: github_token\n    - key: MySecretManagerKey".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: isindir.github.com/v1alpha3\nkind: SopsSecret\nmetadata:\n  name: sopssecret-sample\nspec:\n  secretTemplates:\n    - name: my-secret-name-0\n      stringData:\n        data-name0: data-value0\n        data-nameL: data-valueL\n    - name: my-secret-name-1\n      data:\n        data-name1: ZGF0YS12YWx1ZTE=\n        data-nameM: ZGF0YS12YWx1ZU0=".to_owned()
    }),
    ("gitleaks/kubernetes-secret-yaml", |_| {
        "apiVersion: v1\nkind: Secret\nmetadata:\n  labels:\n    k8s-app: kubernetes-dashboard\n  name: kubernetes-dashboard-csrf\n  namespace: kubernetes-dashboard\ntype: Opaque\ndata:\n  csrf: \"\"\n".to_owned()
    }),
    ("gitleaks/cisco-meraki-api-key", |_| {
        "meraki: aaaaaaaaaa1111111111bbbbbbbbbb2222222222".to_owned()
    }),
    ("gitleaks/cisco-meraki-api-key", |_| {
        "meraki: abdefghjk0123456789mnopqrstuvwx12345678".to_owned()
    }),
    ("gitleaks/cisco-meraki-api-key", |r| {
        format!("ReactNativeCameraKit: {}", r.hex(40))
    }),
    ("gitleaks/notion-api-token", |_| {
        "ntn_12345678901".to_owned()
    }),
    ("gitleaks/notion-api-token", |_| {
        "ntn_123456789012345678901234567890123456789012345678901234567890".to_owned()
    }),
    ("gitleaks/notion-api-token", |_| {
        "ntn_12345678901abc".to_owned()
    }),
    ("gitleaks/nuget-config-password", |_| {
        "<add key=\"ClearTextPassword\" value=\"XXXXXXXXXXX\" />".to_owned()
    }),
    ("gitleaks/nuget-config-password", |_| {
        "<add key=\"ClearTextPassword\" value=\"abc\" />".to_owned()
    }),
    ("gitleaks/nuget-config-password", |_| {
        "<add key=\"ClearTextPassword\" value=\"%TestSourcePassword%\" />".to_owned()
    }),
    ("gitleaks/octopus-deploy-api-key", |_| {
        "msgstr \"GSSAPI-VIRHEKAPSELOINTIMERKKIJONO.\"".to_owned()
    }),
    ("gitleaks/octopus-deploy-api-key", |_| {
        "https://sonarcloud.io/api/project_badges/measure?project=Garden-Coin_API-CalculadoraDeInvestimentos&metric=alert_status".to_owned()
    }),
    ("gitleaks/octopus-deploy-api-key", |_| {
        "https://fog-ringer-f42.notion.site/API-BD80F56CDC1441E6BF6011AB6D852875".to_owned()
    }),
    ("gitleaks/octopus-deploy-api-key", |_| {
        "<iframe src=\"./archive/gifs/api-c99e353f761d318322c853c03e.gif\"> </iframe>".to_owned()
    }),
    ("gitleaks/okta-access-token", |_| {
        format!("oktaKey = {}TUVWXYZ", "0".repeat(35))
    }),
    ("gitleaks/okta-access-token", |r| {
        format!("rookTable = 00{}", r.alnum(40))
    }),
    ("gitleaks/openshift-user-token", |_| {
        "--set kraken.kubeconfig.token.token=\"sha256~XXXXXXXXXX_PUT_YOUR_TOKEN_HERE_XXXXXXXXXXXX\" \\".to_owned()
    }),
    ("gitleaks/openshift-user-token", |_| {
        "oc login --token=sha256~_xxxxxx_xxxxxxxxxxxxxxxxxxxxxx-xxxxxxxxxx-X \\\n    --server=https://api.${zone}.appuio.cloud:6443".to_owned()
    }),
    ("gitleaks/perplexity-api-key", |_| {
        format!("PERPLEXITY_API_KEY=pplx-{}", "x".repeat(48))
    }),
    ("gitleaks/prefect-api-token", |_| {
        format!("PREFECT_API_KEY = \"pnu_{}\"", "X".repeat(36))
    }),
    ("gitleaks/privateai-api-token", |_| {
        format!("const privateaiToken = \"{}\";", "a".repeat(32))
    }),
    ("gitleaks/pulumi-api-token", |r| {
        format!(
            "                        <img src=\"./assets/vipul-{}.png\" alt=\"\" class=\"w-16 h-16 rounded-full\">",
            r.hex(64)
        )
    }),
    ("gitleaks/readme-api-token", |_| {
        format!("const API_KEY = 'rdme_{}';", "X".repeat(70))
    }),
    ("gitleaks/sentry-org-token", |r| {
        format!("sntrys_{}_{}", r.alnum(90), r.alnum(43))
    }),
    ("gitleaks/sentry-org-token", |r| {
        let claims = format!(
            r#"{{"iat":1700000000.5,"url":"https://{}","region_url":"https://{}","org":"{}"}}"#,
            r.lower_alnum(12),
            r.lower_alnum(24),
            r.lower_alnum(7)
        );
        format!(
            "sntrys_{}_{}",
            super::rng::base64(claims.as_bytes(), true),
            r.alnum(42)
        )
    }),
    ("gitleaks/sentry-org-token", |r| {
        let claims = format!(
            r#"{{"iat":1700000000.5,"url":"https://{}","region_url":"https://{}","org":"{}"}}"#,
            r.lower_alnum(12),
            r.lower_alnum(24),
            r.lower_alnum(7)
        );
        format!(
            "sntrys_{}_{}",
            super::rng::base64(claims.as_bytes(), true),
            r.alnum(44)
        )
    }),
    ("gitleaks/sentry-user-token", |r| {
        format!("sntryu_{}", r.hex(63))
    }),
    ("gitleaks/sentry-user-token", |r| {
        format!("sntryu_{}", r.hex(65))
    }),
    ("gitleaks/sentry-user-token", |_| {
        format!("sntryu_{}", "a".repeat(64))
    }),
    ("gitleaks/slack-bot-token", |_| {
        "xoxb-xxxxxxxxx-xxxxxxxxxx-xxxxxxxxxxxx".to_owned()
    }),
    ("gitleaks/slack-bot-token", |_| "xoxb-xxx".to_owned()),
    ("gitleaks/slack-bot-token", |_| {
        "xoxb-12345-abcd234".to_owned()
    }),
    ("gitleaks/slack-bot-token", |_| {
        "xoxb-xoxb-my-bot-token".to_owned()
    }),
    ("gitleaks/slack-user-token", |_| {
        "https://docs.google.com/document/d/1W7KCxOxP-1Fy5EyF2lbJGE2WuKmu5v0suYqoHas1jRM".to_owned()
    }),
    ("gitleaks/slack-user-token", |_| {
        format!(
            "\"token2\": \"xoxp-XXXXXXXXXX-XXXXXXXXXX-XXXXXXXXXXX-{}\"",
            "X".repeat(32)
        )
    }),
    ("gitleaks/slack-config-access-token", |_| {
        "xoxe.xoxp-1-SlackAppConfigurationAccessTokenHere".to_owned()
    }),
    ("gitleaks/slack-config-access-token", |_| {
        "xoxe.xoxp-1-RANDOMSTRINGHERE".to_owned()
    }),
    ("gitleaks/slack-config-access-token", |_| {
        "xoxe.xoxp-1-initial".to_owned()
    }),
    ("gitleaks/slack-config-refresh-token", |_| {
        "xoxe-1-xxx".to_owned()
    }),
    ("gitleaks/slack-config-refresh-token", |_| {
        "XOxE-RROAmw, Home and Garden, 5:24, 20120323".to_owned()
    }),
    ("gitleaks/slack-legacy-bot-token", |_| {
        format!("xoxb-{}-{}", "x".repeat(11), "x".repeat(24))
    }),
    ("gitleaks/slack-legacy-bot-token", |_| {
        "xoxb-Slack_BOT_TOKEN".to_owned()
    }),
    ("gitleaks/slack-legacy-bot-token", |_| {
        "xoxb-abcdef-abcdef".to_owned()
    }),
    ("gitleaks/slack-legacy-workspace-token", |_| {
        "https://github.com/xoxa-nyc/xoxa-nyc.github.io/blob/master/README.md".to_owned()
    }),
    ("gitleaks/slack-legacy-token", |_| {
        "https://indieweb.org/images/3/35/2018-250-xoxo-indieweb-1.jpg".to_owned()
    }),
    ("gitleaks/slack-legacy-token", |_| {
        "https://lh3.googleusercontent.com/-tWXjX3LUD6w/Ua4La_N5E2I/AAAAAAAAACg/qcm19xbEYa4/s640/EXO-XOXO-teaser-exo-k-34521098-720-516.jpg".to_owned()
    }),
    ("gitleaks/sourcegraph-access-token", |_| {
        "sgp_5555555dAAAAA7777777CcccCFaaaaaaaaaaaaaa".to_owned()
    }),
    ("gitleaks/sourcegraph-access-token", |_| {
        "sgp_local_d45b6G86aBb0F2Cee943902dbaDBCFCFDD1dA089".to_owned()
    }),
    ("gitleaks/sourcegraph-access-token", |_| {
        "sgp_652d9a2e48FC7E!FcDbEA1BC2E2A6CE23cFe7F7D".to_owned()
    }),
    ("gitleaks/sourcegraph-access-token", |_| {
        "sgp_78Ad84a5B6e8A2fE5B_4085FB0ccaDDd29DB66Fd7FE9bA2C1cdCE8400CD".to_owned()
    }),
    ("gitleaks/sourcegraph-access-token", |r| {
        r.chars("0123456789abcdefABCDEF", 40)
    }),
    ("gitleaks/square-access-token", |r| {
        format!("aws-cli@sha256:eaaa{}", r.hex(60))
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "- (NSNumber *)sumOfProperty:(NSString *)property;".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "- (NSInteger)sumOfValuesInRange:(NSRange)range;".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "+ (unsigned char)byteChecksumOfData:(id)arg1;".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "sumOfExposures = sumOfExposures;".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        ".si-sumologic.si--color::before { color: #000099; }".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "/// Based on the SumoLogic keyword syntax:".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "sumologic_access_id         = \"\"".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "SUMOLOGIC_ACCESSID: ${SUMOLOGIC_ACCESSID}".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |_| {
        "export SUMOLOGIC_ACCESSID=XXXXXXXXXXXXXX".to_owned()
    }),
    ("gitleaks/sumologic-access-id", |r| {
        format!("sumObj = su{}", r.alnum(12))
    }),
    ("gitleaks/sumologic-access-token", |_| {
        format!("#   SUMO_ACCESS_KEY={}", "x".repeat(64))
    }),
    ("gitleaks/sumologic-access-token", |_| {
        "-e SUMO_ACCESS_KEY=`etcdctl get /sumologic_secret`".to_owned()
    }),
    ("gitleaks/sumologic-access-token", |_| {
        "SUMO_ACCESS_KEY={SumoAccessKey}".to_owned()
    }),
    ("gitleaks/sumologic-access-token", |_| {
        "SUMO_ACCESS_KEY=${SUMO_ACCESS_KEY:=$2}".to_owned()
    }),
    ("gitleaks/sumologic-access-token", |_| {
        "sumo_access_key   = \"<SUMOLOGIC ACCESS KEY>\"".to_owned()
    }),
    ("gitleaks/sumologic-access-token", |r| {
        format!("sumOfExposures = {};", r.alnum(64))
    }),
    ("gitleaks/telegram-bot-api-token", |r| {
        format!(
            "<xsd:element name=\"AgencyIdentificationCode\" type=\"clm{}:AgencyIdentificationCodeContentType\"/>",
            r.digits(5)
        )
    }),
    ("gitleaks/telegram-bot-api-token", |r| {
        format!(
            "<xsd:element name=\"AgencyIdentificationCode\" type=\"clm{}:AgencyIdentificationCodeContentType\"/>",
            r.digits(8)
        )
    }),
    ("gitleaks/vault-service-token", |_| {
        "  credentials: new AWS.SharedIniFileCredentials({ profile: '<YOUR_PROFILE>' })".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        "INFO 4 --- [           main] o.s.b.f.s.DefaultListableBeanFactory     : Overriding bean definition for bean".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        format!("s.{}", "x".repeat(24))
    }),
    ("gitleaks/vault-service-token", |_| {
        "s.THISSTRINGISALLUPPERCASE".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        "s.thisstringisalllowercase".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        "s.AcceptanceTimeoutSeconds ".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        "s.makeKubeConfigController = args".to_owned()
    }),
    ("gitleaks/vault-service-token", |_| {
        format!("hvs.{}", "x".repeat(90))
    }),
    ("gitleaks/1password-service-account-token", |_| {
        "        login:\n          serviceAccountToken:\n            fn::secret: ops_eyJzaWduSW5B..[Redacted]".to_owned()
    }),
    ("gitleaks/1password-service-account-token", |_| {
        ": To start using this service account, run the following command:\n:\n: export OP_SERVICE_ACCOUNT_TOKEN=ops_eyJzaWduSW5BZGRyZXNzIjoiaHR0cHM6...".to_owned()
    }),
    ("gitleaks/1password-service-account-token", |_| {
        format!("ops_eyJ{}", "x".repeat(260))
    }),
    ("gitleaks/1password-secret-key", |_| {
        "A3-XXXXXX-XXXXXXXXXXX-XXXXX-XXXXX-XXXXX".to_owned()
    }),
    ("gitleaks/1password-secret-key", |_| {
        "A3-xXXXXX-XXXXXX-XXXXX-XXXXX-XXXXX-XXXXX".to_owned()
    }),
];
