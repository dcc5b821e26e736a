module github.com/outbox-go/outbox

go 1.25
