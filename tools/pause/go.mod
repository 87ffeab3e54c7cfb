module kubebyon.local/tools/pause

go 1.24.0
