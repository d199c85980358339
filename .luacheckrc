std = "max"
max_line_length = 80
exclude_files = { "build/**" }
files["spec/**/*.lua"] = { std = "+busted" }
files["spec/data/*.lua"] = { max_line_length = false }
files["examples/**/*.lua"] = { read_globals = { "ngx" } }
files["rockspec/*.rockspec"] = { std = "rockspec" }
