package db

import "io/fs"

// Files lists the migration files (for tests).
func Files() ([]fs.DirEntry, error) { return fs.ReadDir(Migrations(), ".") }
