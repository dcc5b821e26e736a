package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// signaturePrefix names the algorithm inside the header value, so that a
// receiver can tell which one was used and a later algorithm can be added
// without a new header.
const signaturePrefix = "sha256="

// SignLegacy returns the legacy signature of body under secret, as the
// publisher sends it in Config.SignatureHeader with Config.LegacySignature:
// "sha256=" followed by the lower-case hex HMAC-SHA256 of the exact body
// bytes, keyed with the secret's bytes as given.
func SignLegacy(secret string, body []byte) string { return signLegacy([]byte(secret), body) }

func signLegacy(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// VerifyLegacy reports whether header is a valid legacy signature
// (SignLegacy) of body under secret; it is meant for receivers that have
// not moved to Verify. It checks no timestamp, so it cannot tell a replayed
// request from a new one. Compute it over the raw request body before any
// parsing, since re-encoded JSON would not match. The comparison takes
// constant time, so the answer's timing does not reveal how much of a forged
// signature was right. An empty secret never verifies: anyone could compute
// such a signature, so accepting it would only hide a missing configuration.
func VerifyLegacy(secret string, body []byte, header string) bool {
	if secret == "" {
		return false
	}
	header = strings.TrimSpace(header)
	if len(header) < len(signaturePrefix) || !strings.EqualFold(header[:len(signaturePrefix)], signaturePrefix) {
		return false
	}
	got, err := hex.DecodeString(header[len(signaturePrefix):])
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}
