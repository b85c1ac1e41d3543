module imp.dev/supervisor

go 1.26.8
