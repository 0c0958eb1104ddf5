module loupe.dev/sdk/go

go 1.19
