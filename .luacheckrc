std = "max"
max_line_length = 80
exclude_files = { "build/**" }
files["spec/**/*.lua"] = { std = "+busted" }
files["spec/data/*.lua"] = { max_line_length = false }
files["examples/**/*.lua"] = { globals = { "ngx" } }
files["rockspec/*.rockspec"] = { std = "rockspec" }
files["spec/nginx/app.lua"] = { globals = { "ngx" } }
files["bin/backoff-delays"] = { std = "max", globals = { "_" } }
files["spec/nginx/fleet_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/fleet_budget_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/http_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/balancer_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/hedge_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/breaker_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/breaker_days_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/store_app.lua"] = { globals = { "ngx" } }
files["spec/nginx/fleet_redis_app.lua"] = { globals = { "ngx" } }
