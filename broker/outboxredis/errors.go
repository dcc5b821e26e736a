package outboxredis

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// replyError reports whether err is an error reply of the Redis server (as
// opposed to a failure to reach it), and returns the reply.
func replyError(err error) (redis.Error, bool) {
	var re redis.Error
	if errors.As(err, &re) {
		return re, true
	}
	return nil, false
}

// transientReplies are the error replies that mean the server cannot take
// any write right now, whatever the message: the relay should pause rather
// than spend the message's retries and, in the end, mark it DEAD.
//
//   - LOADING: the server is loading its data set after a restart.
//   - READONLY, MASTERDOWN: a replica, or a failover in progress.
//   - BUSY: a script or function is running.
//   - TRYAGAIN, CLUSTERDOWN: cluster resharding or failure.
//   - OOM: maxmemory reached with a noeviction policy; consumers trimming
//     or an operator will free memory, and every message would fail alike.
//   - MISCONF: the last background save failed and the server is set to stop
//     writes until one succeeds (stop-writes-on-bgsave-error, the default
//     when save points are set): a full or failing disk.
//   - NOREPLICAS: fewer replicas are in sync than min-replicas-to-write.
//   - "max number of clients reached": the server refused the connection
//     (maxclients).
//   - NOAUTH, WRONGPASS: credentials changed under a running client; only
//     configuration fixes them, but every message would fail alike.
var transientReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "OOM",
	"MISCONF", "NOREPLICAS", "max number of clients reached", "NOAUTH", "WRONGPASS"}

// unavailable reports whether err means Redis could not take the command at
// all, as opposed to refusing this one command (WRONGTYPE, NOPERM on a key, a
// syntax error). Anything that is not an error reply is a connection, pool,
// timeout or context failure, or the client was closed: all unavailable.
func unavailable(err error) bool {
	re, ok := replyError(err)
	if !ok {
		return true
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	for _, p := range transientReplies {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// hint adds what to do about an error reply, where there is something to say.
func hint(err error) string {
	re, ok := replyError(err)
	if !ok {
		return ""
	}
	switch msg := re.Error(); {
	case strings.HasPrefix(msg, "WRONGTYPE"):
		return " (the key holds a value that is not a stream: rename or delete it, or change the stream template)"
	case strings.HasPrefix(msg, "NOPERM"):
		return " (the Redis user's ACL does not allow this command on this key)"
	case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"):
		return " (check the user and password in the URL)"
	case strings.HasPrefix(msg, "OOM"):
		return " (Redis reached maxmemory: trim the streams, e.g. with the maxlen parameter, or raise maxmemory)"
	case strings.HasPrefix(msg, "MISCONF"):
		return " (Redis's last background save failed: see its log, usually a full disk or an unwritable dir)"
	case strings.HasPrefix(msg, "NOREPLICAS"):
		return " (fewer replicas are in sync than min-replicas-to-write: check the replicas)"
	}
	return ""
}
