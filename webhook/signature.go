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

// Sign returns the signature of body under secret, as the publisher sends it
// in the signature header: "sha256=" followed by the lower-case hex
// HMAC-SHA256 of the exact body bytes.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether header is a valid signature of body under secret; it
// is meant for receivers. Compute it over the raw request body before any
// parsing, since re-encoded JSON would not match. The comparison takes
// constant time, so the answer's timing does not reveal how much of a forged
// signature was right. An empty secret never verifies: anyone could compute
// such a signature, so accepting it would only hide a missing configuration.
func Verify(secret string, body []byte, header string) bool {
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
