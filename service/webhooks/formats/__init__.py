"""The webhook message formats: one row each in `table.FORMATS`, one module each (`standard`,
`slack`, `feishu`, `dingtalk`, `wecom`, `teams`, `mail`); `build.build_request` makes the HTTP
request of an attempt. No I/O anywhere in this package."""
