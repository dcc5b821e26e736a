module github.com/outbox-go/outbox

go 1.26.0
