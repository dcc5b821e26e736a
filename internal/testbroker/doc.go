// Package testbroker is test support for the broker adapters: a certificate
// authority made for one test (CA, server and client certificates, an
// expired certificate, a CA that signed nothing), and private broker
// processes (redis-server, nats-server, mosquitto, rabbitmq-server) started on
// free ports in a temporary folder and stopped when the test ends. It never
// touches the brokers the machine runs on their usual ports.
//
// Only tests import it.
package testbroker
