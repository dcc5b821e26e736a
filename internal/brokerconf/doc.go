// Package brokerconf holds what every broker adapter's URL parser needs: a
// configuration error that names the package, typed readers of query
// parameters that leave a field already set alone, the refusal of an unknown
// parameter with a suggestion, and the TLS parameters (tls_ca, tls_cert,
// tls_key, tls_server_name) turned into a *tls.Config.
//
// It uses the standard library only, so that each adapter module can import
// it without pulling in another adapter's client.
package brokerconf
