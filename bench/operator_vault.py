"""A customer's vault for the twelfth session's operator walk (bench/RESULTS.md, "an operator's first day"): Northwind
Freight, 41 notes, 4 text files and 2 PDFs in English and Chinese, nested folders, tags and front matter; and
the question set the operator wrote for it (39 questions in all five tiers).

    python bench/operator_vault.py /tmp/nw          # writes /tmp/nw/vault and /tmp/nw/questions.yaml
    localrag ingest /tmp/nw/vault && localrag eval --questions /tmp/nw/questions.yaml --calibrate
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import make_pdf  # noqa: E402  (the tests' hand-written PDF, so no PDF writer is needed)

out = Path(sys.argv[1])
root = out / "vault"
root.mkdir(parents=True, exist_ok=True)
def w(rel, text):
    p = root / rel; p.parent.mkdir(parents=True, exist_ok=True); p.write_text(text.lstrip("\n"), encoding="utf-8")
def note(rel, title, body, tags=(), fm=None):
    front = ""
    if tags or fm:
        lines = ["---"]
        if tags: lines.append("tags: [" + ", ".join(tags) + "]")
        for k, v in (fm or {}).items(): lines.append(f"{k}: {v}")
        lines.append("---")
        front = "\n".join(lines) + "\n"
    w(rel, front + f"# {title}\n\n" + body.strip() + "\n")

# --- Operations / Warehouse
note("Operations/Warehouse/Cold Chain Handling.md", "Cold Chain Handling", """
Refrigerated shipments must stay between 2 °C and 8 °C from pickup to delivery.

## Temperature excursions
If a data logger records more than 30 minutes outside the 2–8 °C band, quarantine the pallet and open an
excursion report in FreightDesk within 4 hours. Pharmaceutical customers must be called by the account manager.

## Approved carriers
Only carriers with a valid GDP certificate may move cold chain freight. The list is reviewed every quarter.
""", tags=["ops", "cold-chain"], fm={"owner": "Li Wei", "updated": "2026-09-14"})
note("Operations/Warehouse/Dock Scheduling.md", "Dock Scheduling", """
Inbound trucks book a dock slot in YardView at least 24 hours ahead. Slots are 45 minutes long.

## Late arrivals
A truck more than 30 minutes late loses its slot and is rebooked into the next free slot; the carrier is
charged a detention fee of 65 EUR per started hour after the second hour.
""", tags=["ops", "warehouse"])
note("Operations/Warehouse/Forklift Safety.md", "Forklift Safety", """
Every forklift driver renews the forklift licence every 3 years and does a pre-shift checklist.

## Pre-shift checklist
Check brakes, horn, mast chains, tyres and the battery charge. A failed item takes the truck out of service
with a red tag until maintenance signs it off.
""", tags=["safety"])
note("Operations/Warehouse/库存盘点.md", "库存盘点流程", """
每个仓库每月最后一个周六进行循环盘点，A 类货品每周盘点一次。

## 差异处理
盘点差异超过 0.5% 时，仓库主管必须在 48 小时内提交差异分析报告，并在 WMS 中冻结相关库位。
""", tags=["仓储", "ops"])
note("Operations/Warehouse/危险品存储.md", "危险品存储规定", """
危险品必须存放在独立的防爆仓区，与普通货物保持至少 5 米的距离。

## 标签要求
所有危险品外包装须贴有 GHS 标签和 UN 编号，标签缺失的货物不得入库。
""", tags=["安全", "仓储"])
# --- Operations / Transport
note("Operations/Transport/Route Planning.md", "Route Planning", """
Routes are planned nightly by the RouteOpt engine at 22:00 CET and published to drivers' handhelds by 05:00.

## Manual overrides
A dispatcher may override a route before 06:00; every override needs a reason code (weather, road closure,
customer request).
""", tags=["transport"])
note("Operations/Transport/Driver Hours.md", "Driver Hours", """
Drivers follow EU Regulation 561/2006: at most 9 hours of driving per day (10 hours twice a week) and a
45-minute break after 4.5 hours.

## Tachograph downloads
Tachograph data is downloaded every 28 days, driver cards every 21 days.
""", tags=["transport", "compliance"])
note("Operations/Transport/运输异常.md", "运输异常处理", """
货物在途中发生破损、丢失或延误超过 24 小时，司机须立即在 FreightDesk 中登记异常。

## 理赔时限
客户须在签收后 7 天内提出书面理赔申请，超过时限不予受理。赔偿上限为每公斤 8.33 SDR。
""", tags=["运输", "理赔"])
note("Operations/Transport/Fuel Cards.md", "Fuel Cards", """
Each truck has one fuel card with a monthly limit of 4,000 EUR. A lost card is blocked through the
FleetPay hotline and a new one arrives within 5 working days.
""", tags=["transport", "finance"])
# --- Products
note("Products/FreightDesk/FreightDesk Overview.md", "FreightDesk Overview", """
FreightDesk is Northwind's shipment management platform: bookings, tracking, exceptions and invoicing.

## Editions
FreightDesk comes in Standard (up to 50 users) and Enterprise (unlimited users, SSO, audit log).

## Integrations
FreightDesk connects to SAP S/4HANA, Oracle NetSuite and any EDI partner speaking EDIFACT IFTMIN.
""", tags=["product", "freightdesk"])
note("Products/FreightDesk/FreightDesk API.md", "FreightDesk API", """
The REST API lives at https://api.freightdesk.example/v2 and authenticates with OAuth 2 client credentials.

## Rate limits
Each client may send 600 requests per minute; above that the API answers HTTP 429 with a Retry-After header.

## Webhooks
Webhooks fire on shipment.created, shipment.delivered and exception.opened. Failed deliveries are retried
8 times with exponential backoff.
""", tags=["product", "freightdesk", "api"])
note("Products/FreightDesk/FreightDesk 常见问题.md", "FreightDesk 常见问题", """
## 如何导出运单数据？
在“报表”页面选择时间范围，点击“导出”，可导出 CSV 或 Excel 格式，单次最多 100,000 行。

## 忘记密码怎么办？
在登录页点击“忘记密码”，系统会向注册邮箱发送重置链接，链接 30 分钟内有效。
""", tags=["product", "freightdesk", "faq"])
note("Products/FreightDesk/Release Notes 4.2.md", "FreightDesk 4.2 Release Notes", """
Released 2026-08-03.

## New
- Carbon footprint per shipment, calculated with the GLEC framework.
- Bulk exception closing for up to 500 exceptions at once.

## Fixed
- Invoices with more than 999 lines no longer time out.
""", tags=["product", "release"])
note("Products/YardView/YardView Overview.md", "YardView Overview", """
YardView manages dock slots, yard moves and gate check-in with licence-plate recognition cameras.

## Hardware
Gate cameras are Axis P1465-LE; a gate needs two, one per lane.
""", tags=["product", "yardview"])
note("Products/YardView/YardView 安装指南.md", "YardView 安装指南", """
## 服务器要求
YardView 服务器需要 8 核 CPU、32 GB 内存和 500 GB SSD，操作系统为 Ubuntu 22.04。

## 网络端口
摄像头与服务器之间需开放 554 端口（RTSP），客户端访问使用 443 端口。
""", tags=["product", "yardview", "安装"])
note("Products/RouteOpt/RouteOpt.md", "RouteOpt", """
RouteOpt is the route optimisation engine behind nightly planning. It handles up to 2,000 stops per depot and
respects time windows, vehicle capacity and driver hours.
""", tags=["product", "routeopt"])
note("Products/Pricing.md", "Pricing", """
## FreightDesk
Standard costs 45 EUR per user per month; Enterprise is quoted per customer with a minimum of 20,000 EUR a year.

## YardView
YardView is licensed per gate: 3,500 EUR per gate per year, cameras not included.
""", tags=["product", "sales"])
# --- Support
note("Support/Escalation Matrix.md", "Escalation Matrix", """
| Severity | First response | Escalate to |
|---|---|---|
| Sev1 | 15 minutes | Duty manager, then CTO after 2 hours |
| Sev2 | 1 hour | Team lead |
| Sev3 | 1 working day | - |

## Sev1 definition
A Sev1 is a full outage of FreightDesk or YardView for more than one customer, or any data loss.
""", tags=["support", "escalation"])
note("Support/Support Hours.md", "Support Hours", """
Standard support is Monday to Friday, 08:00–18:00 CET. Enterprise customers have 24/7 support for Sev1 and Sev2.
""", tags=["support"])
note("Support/工单处理规范.md", "工单处理规范", """
所有客户工单必须在 FreightDesk 支持门户中创建，禁止仅通过微信或电话处理。

## 工单关闭
客户确认问题解决后方可关闭工单；客户 5 个工作日未回复，系统自动关闭。
""", tags=["support", "工单"])
note("Support/Known Issues/Label Printer Offline.md", "Label Printer Offline", """
Zebra ZT410 printers drop off the network after a firmware update to V84.20.

## Workaround
Set a static IP on the printer and disable power saving in the printer's web page.
""", tags=["support", "known-issue"])
note("Support/Known Issues/EDI Duplicate Messages.md", "EDI Duplicate Messages", """
Some partners resend IFTMIN messages after a timeout, which creates duplicate bookings.

## Fix
Enable "deduplicate by message reference" under Integrations > EDI; duplicates within 72 hours are dropped.
""", tags=["support", "known-issue", "edi"])
note("Support/Known Issues/扫码枪无法连接.md", "扫码枪无法连接", """
Honeywell CT40 扫码枪升级到 Android 13 后可能无法连接仓库 Wi-Fi。

## 解决办法
在设备设置中关闭“随机 MAC 地址”，然后重新连接网络。
""", tags=["support", "known-issue"])
# --- HR
note("HR/Leave Policy.md", "Leave Policy", """
Full-time employees get 28 days of paid annual leave plus public holidays. Up to 5 unused days can be carried
into the next year and must be taken by 31 March.

## Sick leave
Report sickness to your manager before 09:00; a doctor's note is needed from the fourth day.
""", tags=["hr"])
note("HR/Expenses.md", "Expenses", """
Submit expenses in SpendWise within 30 days. Hotel nights are reimbursed up to 150 EUR (220 EUR in London,
Paris and Zurich). Meals on travel days: 40 EUR per day.
""", tags=["hr", "finance"])
note("HR/入职指南.md", "新员工入职指南", """
新员工入职第一天需携带身份证原件、银行卡和学历证明到人事部报到。

## 试用期
试用期为 3 个月，期间每月与直属经理进行一次绩效面谈。
""", tags=["hr", "入职"])
note("HR/Training/Safety Induction.md", "Safety Induction", """
Every new warehouse employee completes a 4-hour safety induction before the first shift, including
evacuation routes and the hazardous goods briefing.
""", tags=["hr", "safety"])
note("HR/Training/培训预算.md", "培训预算", """
每位员工每年的培训预算为 1,500 欧元，需提前两周在 SpendWise 中提交申请并由经理审批。
""", tags=["hr", "培训"])
# --- IT / Security
note("IT/Password Policy.md", "Password Policy", """
Passwords need at least 14 characters and are not rotated on a schedule; change one only when it may be
compromised. MFA is mandatory for FreightDesk, email and VPN.
""", tags=["it", "security"])
note("IT/VPN Setup.md", "VPN Setup", """
Install GlobalProtect from the software centre, then connect to vpn.northwind.example with your SSO account.

## Troubleshooting
Error "gateway not reachable": check that the laptop's clock is correct; a skew of more than 5 minutes breaks
the certificate check.
""", tags=["it", "vpn"])
note("IT/Backups.md", "Backups", """
Production databases are backed up every 4 hours; backups are kept for 35 days and copied to a second region.

## Restore test
A restore is tested every month on the staging cluster; the last result is in the IT status page.
""", tags=["it", "backup"])
note("IT/Incident Response/Security Incident.md", "Security Incident", """
Report any suspected security incident to security@northwind.example or the hotline within 1 hour.

## Personal data breaches
If personal data may be affected, the DPO must be informed at once: the authority has to be notified within
72 hours under GDPR.
""", tags=["security", "incident"])
note("IT/Incident Response/数据泄露.md", "数据泄露应急预案", """
发现疑似数据泄露后，第一发现人须在 1 小时内通知信息安全部，并保留相关日志，不得自行删除任何文件。
""", tags=["security", "incident"])
# --- Sales / customers
note("Sales/Customers/Helios Pharma.md", "Helios Pharma", """
Helios Pharma is an Enterprise customer since 2024 shipping vaccines across DACH. Account manager: Anna Berg.

## Special terms
Cold chain excursions are reported to Helios within 2 hours (not the standard 4).
""", tags=["customer", "pharma"])
note("Sales/Customers/华东医药.md", "华东医药", """
华东医药为 2025 年签约的企业版客户，主要业务为上海至杭州的冷链配送。客户经理：陈静。

## 特殊条款
每月提供一次温度记录报告，合同年费 38 万元人民币。
""", tags=["customer", "医药"])
note("Sales/Discount Policy.md", "Discount Policy", """
Sales reps may grant up to 10% discount; 10–25% needs the sales director; above 25% needs the CFO.
Non-profit organisations get 30% off FreightDesk Standard.
""", tags=["sales"])
note("Sales/Contract Renewal.md", "Contract Renewal", """
Contracts renew automatically for 12 months unless cancelled in writing 90 days before the end date.
""", tags=["sales", "legal"])
# --- Meetings (nested by year)
note("Meetings/2026/2026-09-01 Ops Weekly.md", "Ops Weekly 2026-09-01", """
- Hamburg depot dock 7 is closed for repairs until 2026-10-15.
- Decision: all Sev1 post-mortems are due within 5 working days.
""", tags=["meeting"], fm={"date": "2026-09-01"})
note("Meetings/2026/2026-10-06 产品周会.md", "产品周会 2026-10-06", """
- 决定：FreightDesk 4.3 将于 11 月 17 日发布，新增多语言运单打印。
- YardView 车牌识别准确率提升至 98.5%。
""", tags=["meeting"], fm={"date": "2026-10-06"})
# --- Glossary / index
note("Glossary.md", "Glossary", """
- **POD**: proof of delivery, the signed delivery receipt.
- **ETA**: estimated time of arrival.
- **SDR**: special drawing right, the IMF unit used for carrier liability.
- **GDP**: Good Distribution Practice for medicinal products.
""", tags=["glossary"])
w("Home.md", "# Northwind Knowledge Base\n\nStart with [[FreightDesk Overview]], [[Escalation Matrix]] and "
             "[[Leave Policy]].\n")
# --- TXT files
w("Support/Phone Scripts/greeting.txt", """Phone greeting script

Answer with: "Northwind Freight support, this is <name>, how can I help?"
Always ask for the shipment number first; it starts with NW and has 10 digits.
""")
w("Operations/Transport/customs-checklist.txt", """Customs checklist for UK shipments

Every UK-bound shipment needs an EORI number, a commercial invoice and the commodity code (HS code).
Goods over 1,000 GBP need a customs declaration filed by our broker, Brexpress, at least 2 hours before the ferry.
""")
w("HR/holiday-calendar-2027.txt", """2027 office holidays (Hamburg)

1 January, Good Friday, Easter Monday, 1 May, Ascension Day, Whit Monday, 3 October, 24 to 26 December, 31 December.
""")
w("IT/printer-list.txt", """打印机清单

汉堡仓库：Zebra ZT410 共 12 台，HP LaserJet M507 共 3 台。
上海办公室：HP LaserJet M507 共 2 台。
""")
# --- PDFs
(root / "Products/FreightDesk/FreightDesk SLA.pdf").write_bytes(make_pdf([
    "FreightDesk Service Level Agreement. Monthly availability target 99.9 percent for Enterprise.",
    "Service credits: 5 percent of the monthly fee for each 0.1 percent below target, up to 25 percent.",
]))
(root / "Operations/Warehouse/Pallet Standards.pdf").write_bytes(make_pdf([
    "Pallet standards. We accept EUR pallets 1200 x 800 mm only; maximum height 1.8 metres; maximum weight 1000 kg.",
]))

QUESTIONS = '''\
# Northwind Freight vault: questions the support desk actually gets
- id: cold-band
  question: What temperature range must refrigerated shipments stay in?
  expected_sources: ["Operations/Warehouse/Cold Chain Handling.md"]
  tier: lexical
  lang: en
  expected_facts: ["2 °C and 8 °C"]
- id: excursion-report
  question: How soon must a temperature excursion report be opened?
  expected_sources: ["Operations/Warehouse/Cold Chain Handling.md"]
  tier: lexical
  lang: en
  expected_facts: ["4 hours"]
- id: detention-fee
  question: What detention fee is charged when a truck arrives late?
  expected_sources: ["Operations/Warehouse/Dock Scheduling.md"]
  tier: lexical
  lang: en
  expected_facts: ["65 EUR"]
- id: forklift-licence
  question: How often must the forklift licence be renewed?
  expected_sources: ["Operations/Warehouse/Forklift Safety.md"]
  tier: lexical
  lang: en
- id: api-rate
  question: What is the FreightDesk API rate limit?
  expected_sources: ["Products/FreightDesk/FreightDesk API.md"]
  tier: lexical
  lang: en
  expected_facts: ["600 requests per minute"]
- id: webhook-retry
  question: How many times are failed webhooks retried?
  expected_sources: ["Products/FreightDesk/FreightDesk API.md"]
  tier: lexical
  lang: en
- id: yardview-price
  question: How much does YardView cost per gate?
  expected_sources: ["Products/Pricing.md"]
  tier: lexical
  lang: en
- id: sev1-response
  question: What is the first response time for a Sev1?
  expected_sources: ["Support/Escalation Matrix.md"]
  tier: lexical
  lang: en
- id: zebra
  question: Why does the Zebra ZT410 printer go offline?
  expected_sources: ["Support/Known Issues/Label Printer Offline.md"]
  tier: lexical
  lang: en
- id: carry-over
  question: How many unused leave days can be carried over?
  expected_sources: ["HR/Leave Policy.md"]
  tier: lexical
  lang: en
- id: hotel
  question: What is the hotel reimbursement limit in London?
  expected_sources: ["HR/Expenses.md"]
  tier: lexical
  lang: en
- id: backup-retention
  question: How long are database backups kept?
  expected_sources: ["IT/Backups.md"]
  tier: lexical
  lang: en
- id: customs-uk
  question: What documents does a UK shipment need for customs?
  expected_sources: ["Operations/Transport/customs-checklist.txt"]
  tier: lexical
  lang: en
- id: sla
  question: What is the FreightDesk availability target in the SLA?
  expected_sources: ["Products/FreightDesk/FreightDesk SLA.pdf"]
  tier: lexical
  lang: en
- id: pallet
  question: What is the maximum pallet height?
  expected_sources: ["Operations/Warehouse/Pallet Standards.pdf"]
  tier: lexical
  lang: en
- id: zh-stock
  question: 盘点差异超过多少需要提交差异分析报告？
  expected_sources: ["Operations/Warehouse/库存盘点.md"]
  tier: lexical
  lang: zh
- id: zh-claim
  question: 客户理赔申请的时限是多少天？
  expected_sources: ["Operations/Transport/运输异常.md"]
  tier: lexical
  lang: zh
- id: zh-export
  question: FreightDesk 如何导出运单数据？
  expected_sources: ["Products/FreightDesk/FreightDesk 常见问题.md"]
  tier: lexical
  lang: zh
- id: zh-ports
  question: YardView 需要开放哪些网络端口？
  expected_sources: ["Products/YardView/YardView 安装指南.md"]
  tier: lexical
  lang: zh
- id: zh-scanner
  question: 扫码枪升级后无法连接 Wi-Fi 怎么办？
  expected_sources: ["Support/Known Issues/扫码枪无法连接.md"]
  tier: lexical
  lang: zh
- id: zh-probation
  question: 新员工试用期是多久？
  expected_sources: ["HR/入职指南.md"]
  tier: lexical
  lang: zh
- id: zh-budget
  question: 每位员工每年的培训预算是多少？
  expected_sources: ["HR/Training/培训预算.md"]
  tier: lexical
  lang: zh
# paraphrases: the note's words avoided
- id: para-fridge
  question: What happens if the fridge truck gets too warm?
  expected_sources: ["Operations/Warehouse/Cold Chain Handling.md"]
  tier: paraphrase
  lang: en
- id: para-holiday
  question: How much time off do staff get each year?
  expected_sources: ["HR/Leave Policy.md"]
  tier: paraphrase
  lang: en
- id: para-throttle
  question: What happens when my integration calls too often?
  expected_sources: ["Products/FreightDesk/FreightDesk API.md"]
  tier: paraphrase
  lang: en
- id: para-zh-breach
  question: 公司信息被黑客偷走了应该怎么做？
  expected_sources: ["IT/Incident Response/数据泄露.md", "IT/Incident Response/Security Incident.md"]
  tier: paraphrase
  lang: zh
# cross-language: asked in English, answered by a Chinese note
- id: cross-probation
  question: How long is the probation period for new hires?
  expected_sources: ["HR/入职指南.md"]
  tier: cross
  lang: en
- id: cross-hazmat
  question: 危险品和普通货物之间要隔多远？
  expected_sources: ["Operations/Warehouse/危险品存储.md"]
  tier: lexical
  lang: zh
# near misses: in the domain, not in the vault
- id: nm-yardview-cameras-price
  question: How much does an Axis gate camera cost?
  tier: near_miss
  lang: en
- id: nm-api-v1
  question: When will the FreightDesk API v1 be switched off?
  tier: near_miss
  lang: en
- id: nm-parental
  question: How many weeks of parental leave do employees get?
  tier: near_miss
  lang: en
- id: nm-zh-yardview-os
  question: YardView 支持 Windows Server 吗？
  tier: near_miss
  lang: zh
- id: nm-zh-bonus
  question: 年终奖什么时候发放？
  tier: near_miss
  lang: zh
- id: nm-fuel-card-pin
  question: How do I reset the PIN of a fuel card?
  tier: near_miss
  lang: en
# off-topic
- id: off-weather
  question: What's the weather in Hamburg tomorrow?
  tier: offtopic
  lang: en
- id: off-recipe
  question: How do I bake sourdough bread?
  tier: offtopic
  lang: en
- id: off-football
  question: Who won the 2022 World Cup?
  tier: offtopic
  lang: en
- id: off-zh-stock
  question: 今天上证指数收盘多少点？
  tier: offtopic
  lang: zh
- id: off-zh-travel
  question: 去西湖旅游有什么推荐？
  tier: offtopic
  lang: zh
'''

(out / "questions.yaml").write_text(QUESTIONS, encoding="utf-8")
print(f"{root}: {sum(1 for p in root.rglob('*') if p.is_file())} files; {out / 'questions.yaml'}")
